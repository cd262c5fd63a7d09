import Foundation

/// `storectl migrate status`: applied, pending, drifted.
public enum MigrationStatus {
    public struct Result: Sendable, Codable {
        public var plan: MigrationPlan
        public var interrupted: MigrationJournal?

        /// Checks failed (2) when a migration drifted or is missing, or a run was interrupted.
        public var ending: Ending {
            guard !plan.drifted.isEmpty || !plan.missing.isEmpty || interrupted != nil else { return .ok }
            return Ending(.checksFailed, error: StoreOpsError(.checksFailed, "the migration history needs attention"))
        }
    }

    public static func run(store path: String, migrations folder: String) throws -> Result {
        let store = try StoreFile(existing: path)
        let migrations = try Migration.load(folder: folder)
        var plan = try Migrate.readOnly(store, timeout: 10) { db -> MigrationPlan in
            var plan = MigrationPlan.make(migrations, history: try MigrationHistory.read(db))
            plan.lint(migrations, schema: try StoreSchema.read(db))
            return plan
        }
        plan.target = max(plan.target, plan.current)
        return Result(plan: plan, interrupted: MigrationJournal.read(store))
    }
}
