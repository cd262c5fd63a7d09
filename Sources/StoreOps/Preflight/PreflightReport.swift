import Foundation

/// What `storectl preflight` returns: every check, the Core Data entity counts, and the verdict.
public struct PreflightReport: Sendable, Codable {
    /// True when no check failed (warnings pass): the verdict, for machines.
    public var ok: Bool
    /// The exit status `storectl preflight` ends with: 0 passed, 2 a check failed, 75 the store stayed
    /// locked (nothing read: `store.locked`).
    public var status: Int32
    public var store: String
    public var operation: Preflight.Operation
    public var destination: String
    public var checks: [Check]
    /// Core Data stores only: rows per entity.
    public var entities: [CoreDataCensus.EntityCount]?
    public var startedAt: Date
    public var durationSeconds: Double

    public init(store: String, operation: Preflight.Operation, destination: String, checks: [Check],
                entities: [CoreDataCensus.EntityCount]?, startedAt: Date, durationSeconds: Double) {
        ok = !checks.contains { $0.status == .fail }
        status = 0
        self.store = store
        self.operation = operation
        self.destination = destination
        self.checks = checks
        self.entities = entities
        self.startedAt = startedAt
        self.durationSeconds = durationSeconds
        status = ending.status.rawValue   // the JSON's status: the ending's, through the one exit map
    }

    /// True when no check failed (warnings pass).
    public var passed: Bool { !checks.contains { $0.status == .fail } }

    public var ending: Ending {
        // A store nothing could be read from (locked past the timeout): the report says what it
        // could (the lock's holder), and the exit is busy's, as every command's is (75: try again).
        if check("store.locked")?.status == .fail {
            return Ending(.failed, error: StoreOpsError(.busy, "preflight could not read the store: it stayed locked (store.locked)"))
        }
        return passed ? .ok : Ending(.checksFailed, error: StoreOpsError(.checksFailed, "preflight failed: " + checks.filter { $0.status == .fail }.map(\.id).joined(separator: ", ")))
    }

    public func check(_ id: String) -> Check? { checks.first { $0.id == id } }


}
