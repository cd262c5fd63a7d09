// StoreOps: the library behind storectl. Folders are the nouns of the domain:
//   Pipeline/   the road every operation that copies or changes a store walks: lock, preflight,
//               snapshot, act, verify, commit, rollback; its stage clock; how a run ends (Ending),
//               and the one place that becomes an exit status
//   Support/    errors and exit statuses, signals, file-system primitives and their named fault
//               points, atomic files, hashing, formatting, JSON, progress values, option checks
//   Store/      validating and opening stores, their schema and state, SQLite's locks, the job lock,
//               the kill switch, the journaled swap of a store's files and its recovery, trigger lint
//   CoreData/   Z_METADATA, Z_PRIMARYKEY, Z_MODELCACHE, entity counts, keys and orphans
//   Manifest/   the description of every copy storectl makes
//   Backup/     the consistent-copy engine, external data, and `storectl backup`
//   Preflight/  checks before anything risky, as values
//   Snapshot/   the repository, archives (reader, writer, zstd, entry rules), create, verify,
//               restore, retention and prune
//   Migration/  migration files and Swift stages, the history, the plan and its lint, the journal,
//               migrate, rollback, status
//   Policy/     the policy file format, its strict parser, check and explain
//   Purge/      the planner (pure over a schema), the delete graph, batch closures, the breaker, purge
//   Jobs/       cron expressions, crontab and systemd rendering, `storectl run`, the job log and its
//               rotation, metrics
//
// The storectl command (Sources/storectl) parses, calls one entry point here, and renders.
