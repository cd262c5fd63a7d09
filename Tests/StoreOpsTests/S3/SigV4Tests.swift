import Foundation
import StoreLab
import StoreOps
import Testing

/// AWS's published examples for S3 ("Signature Calculations for the Authorization Header:
/// Transferring Payload in a Single Chunk"): the example credentials, 2013-05-24, us-east-1,
/// virtual-hosted `examplebucket`. A signer that is wrong anywhere (encoding, sorting, the key
/// derivation) gets a different signature.
@Suite("S3: Signature Version 4 and configuration")
struct SigV4Tests {
    let signer = SigV4(credentials: .init(accessKey: "AKIAIOSFODNN7EXAMPLE", secretKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
                       region: "us-east-1")
    let host = "examplebucket.s3.amazonaws.com"
    let date = "20130524T000000Z"

    func signature(_ header: String) -> String { String(header.split(separator: "=").last ?? "") }

    @Test("GET Object with a Range header")
    func getObject() {
        let header = signer.authorization(method: "GET", path: "/test.txt", query: [],
                                          headers: ["Host": host, "Range": "bytes=0-9", "x-amz-content-sha256": SigV4.emptyPayload, "x-amz-date": date],
                                          payloadHash: SigV4.emptyPayload)
        #expect(header == "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,SignedHeaders=host;range;x-amz-content-sha256;x-amz-date,Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41")
    }

    @Test("PUT Object: a key that needs encoding ($), a Date and a storage-class header, a signed payload")
    func putObject() {
        let body = Data("Welcome to Amazon S3.".utf8)
        let hash = Hashing.sha256(body)
        #expect(hash == "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072")
        let header = signer.authorization(method: "PUT", path: "/test$file.text", query: [],
                                          headers: ["Host": host, "Date": "Fri, 24 May 2013 00:00:00 GMT", "x-amz-date": date,
                                                    "x-amz-storage-class": "REDUCED_REDUNDANCY", "x-amz-content-sha256": hash],
                                          payloadHash: hash)
        #expect(header.hasSuffix("SignedHeaders=date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class,Signature=98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd"))
    }

    @Test("GET Bucket lifecycle: a query parameter without a value")
    func lifecycle() {
        let header = signer.authorization(method: "GET", path: "/", query: [("lifecycle", "")],
                                          headers: ["Host": host, "x-amz-date": date, "x-amz-content-sha256": SigV4.emptyPayload],
                                          payloadHash: SigV4.emptyPayload)
        #expect(signature(header) == "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543")
    }

    @Test("GET Bucket (list objects): query parameters sorted by name")
    func listObjects() {
        let header = signer.authorization(method: "GET", path: "/", query: [("prefix", "J"), ("max-keys", "2")],
                                          headers: ["Host": host, "x-amz-date": date, "x-amz-content-sha256": SigV4.emptyPayload],
                                          payloadHash: SigV4.emptyPayload)
        #expect(signature(header) == "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7")
    }

    @Test("URI encoding: unreserved characters kept, everything else %XX; / kept in paths only")
    func encoding() {
        #expect(SigV4.encode("a/b c+d~e_f.g-h", slash: false) == "a/b%20c%2Bd~e_f.g-h")
        #expect(SigV4.encode("a/b=é", slash: true) == "a%2Fb%3D%C3%A9")
        #expect(SigV4.amzDate(Date(timeIntervalSince1970: 1_369_353_600)) == "20130524T000000Z")
    }

    @Test("settings: environment before the profile files; endpoint, region and path-style; the secret never shown")
    func settings() throws {
        let folder = try TempFolder()
        let credentials = folder.file("credentials"), config = folder.file("config")
        try "[default]\naws_access_key_id = AKIDDEFAULT\naws_secret_access_key = secret-default\n\n[work]\naws_access_key_id = AKIDWORK\naws_secret_access_key = secret-work\n"
            .write(toFile: credentials, atomically: true, encoding: .utf8)
        try "[profile work]\nregion = eu-west-3\ns3 =\n  endpoint_url = http://10.1.2.3:9000\n  addressing_style = virtual\n"
            .write(toFile: config, atomically: true, encoding: .utf8)
        let files = ["AWS_SHARED_CREDENTIALS_FILE": credentials, "AWS_CONFIG_FILE": config, "HOME": folder.path]

        let plain = try S3Settings.resolve(bucket: "b-1", environment: files)
        #expect(plain.credentials.accessKey == "AKIDDEFAULT" && plain.region == "us-east-1")
        #expect(plain.endpoint == "https://s3.us-east-1.amazonaws.com" && !plain.pathStyle && plain.parallel == 4)

        let work = try S3Settings.resolve(bucket: "b-1", environment: files.merging(["AWS_PROFILE": "work"]) { $1 })
        #expect(work.credentials.accessKey == "AKIDWORK" && work.region == "eu-west-3")
        #expect(work.endpoint == "http://10.1.2.3:9000" && !work.pathStyle, "the profile's addressing_style wins over auto")

        let env = try S3Settings.resolve(bucket: "b-1", environment: files.merging([
            "AWS_PROFILE": "work", "AWS_ACCESS_KEY_ID": "AKIDENV", "AWS_SECRET_ACCESS_KEY": "secret-env", "AWS_SESSION_TOKEN": "token",
            "AWS_REGION": "ap-south-1", "AWS_ENDPOINT_URL": "http://ignored:1", "AWS_ENDPOINT_URL_S3": "http://127.0.0.1:8333/",
            "STORECTL_S3_PARALLEL": "8",
        ]) { $1 })
        #expect(env.credentials == SigV4.Credentials(accessKey: "AKIDENV", secretKey: "secret-env", sessionToken: "token"))
        #expect(env.region == "ap-south-1" && env.endpoint == "http://127.0.0.1:8333" && env.parallel == 8)
        #expect(!env.description.contains("secret") && !env.description.contains("token") && env.description.contains("AKIDENV"))

        let local = try S3Settings.resolve(bucket: "b-1", environment: files.merging(["AWS_ENDPOINT_URL_S3": "http://localhost:9000"]) { $1 })
        #expect(local.pathStyle, "path-style is automatic for localhost and IP endpoints")

        // AWS_CA_BUNDLE counts for https endpoints only; one that is not a file is 66.
        #expect(try S3Settings.resolve(bucket: "b-1", environment: files.merging(["AWS_CA_BUNDLE": credentials]) { $1 }).caBundle == credentials)
        #expect(try S3Settings.resolve(bucket: "b-1", environment: files.merging(["AWS_CA_BUNDLE": credentials, "AWS_PROFILE": "work"]) { $1 }).caBundle == nil)
        let noBundle = #expect(throws: StoreOpsError.self) {
            try S3Settings.resolve(bucket: "b-1", environment: files.merging(["AWS_CA_BUNDLE": folder.file("missing.pem")]) { $1 })
        }
        #expect(noBundle?.status == .noInput && noBundle?.message.contains("AWS_CA_BUNDLE") == true)

        let none = #expect(throws: StoreOpsError.self) { try S3Settings.resolve(bucket: "b-1", environment: ["HOME": folder.path]) }
        #expect(none?.status == .usage && none?.message.contains("AWS_ACCESS_KEY_ID") == true)
        let badEndpoint = #expect(throws: StoreOpsError.self) {
            try S3Settings.resolve(bucket: "b-1", environment: files.merging(["AWS_ENDPOINT_URL_S3": "ftp://x/y"]) { $1 })
        }
        #expect(badEndpoint?.status == .usage)
        let badParallel = #expect(throws: StoreOpsError.self) { try S3Settings.resolve(bucket: "b-1", environment: files.merging(["STORECTL_S3_PARALLEL": "0"]) { $1 }) }
        #expect(badParallel?.message.contains("STORECTL_S3_PARALLEL") == true)
    }

    @Test("s3:// URLs: bucket and prefix; bad bucket names and . or .. segments are 64")
    func urls() throws {
        #expect(try S3Backend.parse("s3://my-bucket/fleet/host-1/") == ("my-bucket", "fleet/host-1"))
        #expect(try S3Backend.parse("s3://my.bucket") == ("my.bucket", ""))
        for bad in ["s3://", "s3://UPPER/x", "s3://ab/x", "s3://-bucket/x", "s3://bucket/a/../b"] {
            #expect((#expect(throws: StoreOpsError.self) { try S3Backend.parse(bad) })?.status == .usage, "\(bad)")
        }
    }
}
