// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "storectl",
    platforms: [.macOS(.v14)],
    products: [
        .library(name: "StoreOps", targets: ["StoreOps"]),
        .executable(name: "storectl", targets: ["storectl"]),
        .executable(name: "storectl-lab", targets: ["storectl-lab"]),
    ],
    dependencies: [
        .package(url: "https://github.com/groue/GRDB.swift", from: "7.10.0"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-crypto", from: "3.12.3"),
        .package(url: "https://github.com/LebJe/TOMLKit", from: "0.6.0"),
    ],
    targets: [
        // C libraries, one system-library target each (module.modulemap + shim.h).
        .systemLibrary(
            name: "CLibArchive",
            pkgConfig: "libarchive",
            providers: [.apt(["libarchive-dev"])]),
        .systemLibrary(
            name: "CZstd",
            pkgConfig: "libzstd",
            providers: [.apt(["libzstd-dev"])]),
        .systemLibrary(
            name: "CZlib",
            pkgConfig: "zlib",
            providers: [.apt(["zlib1g-dev"])]),
        // The few libc calls Swift cannot reach (renameat2 needs _GNU_SOURCE).
        .target(name: "CStoreSupport"),
        // A SQLite VFS whose "file" hands each page written to it to Swift: snapshots stream a
        // store's pages into a repository through SQLite's backup API, with no scratch copy.
        .target(
            name: "CSQLiteSink",
            dependencies: [.product(name: "GRDBSQLite", package: "GRDB.swift")]),

        // HTTP for S3 repositories: libcurl's easy interface, one blocking request per call.
        // libcurl is loaded (dlopen) by the first request, not linked: see http.c. The package
        // still depends on libcurl4 (packaging/debian-control.sh), the build on its headers.
        .target(
            name: "CHTTP"),

        // The library that does the work.
        .target(
            name: "StoreOps",
            dependencies: [
                .product(name: "GRDB", package: "GRDB.swift"),
                .product(name: "GRDBSQLite", package: "GRDB.swift"),
                .product(name: "Crypto", package: "swift-crypto"),
                // scrypt, for the passwords of encrypted repositories.
                .product(name: "_CryptoExtras", package: "swift-crypto"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "TOMLKit", package: "TOMLKit"),
                "CLibArchive",
                "CZlib",
                "CZstd",
                "CStoreSupport",
                "CSQLiteSink",
                "CHTTP",
            ]),
        // Sample stores and write load for the demo, the tests and the benchmarks.
        // libarchive directly: the fixtures write hostile archives (links, devices, size bombs)
        // that the library must never be able to write.
        .target(
            name: "StoreLab",
            dependencies: [
                "StoreOps",
                "CStoreSupport",
                .product(name: "GRDB", package: "GRDB.swift"),
                "CLibArchive",
            ]),

        // Thin command-line layers.
        .executableTarget(
            name: "storectl",
            dependencies: [
                "StoreOps",
                "CStoreSupport",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]),
        .executableTarget(
            name: "storectl-lab",
            dependencies: [
                "StoreLab",
                "StoreOps",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ]),

        .testTarget(
            name: "StoreOpsTests",
            dependencies: [
                "StoreOps", "StoreLab", "storectl-lab",
                .product(name: "GRDB", package: "GRDB.swift"),
            ]),
        .testTarget(
            name: "StorectlCLITests",
            dependencies: [
                "StoreOps", "StoreLab", "storectl", "storectl-lab",
                .product(name: "GRDB", package: "GRDB.swift"),
            ]),
    ],
    swiftLanguageModes: [.v6]
)
