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
//   Snapshot/   the portable archive of one snapshot (reader, writer, zstd, entry rules: what
//               export writes and import reads), and create, verify, restore, import, retention, prune
//   Repository/ where a repository is, config, init, the lock and the hold, records, the catalog;
//     Keys/       master key, key files (scrypt), sealing, content ids' keys, passwords
//     Pack/       content ids, blobs, frames (zstd), packs and their writer, reading blobs back
//     Index/      index files
//     PageMap/    a snapshot's page map (base + changes), page tables, bitsets
//     Stream/     the page stream a snapshot is made from (backup API into a sink), its checks
//     Restore/    reassembling a snapshot's database from its map and packs
//     Garbage/    prune's second half: a pure plan (keep, repack, remove) and its execution
//     Check/      repo check, repair, stats
//     Convert/    repo convert, and the only reader of format-1 repositories (earlier builds')
//   Replicate/  `storectl replicate`: the -wal's format, the follower and its continuity proofs,
//               point segments and chains, the loop and its uploader, restore at a time, points
//               retention, status and metrics
//   Diff/       `storectl diff`: SQLite's file format read from raw pages, the sides as pages (a
//               file under a read transaction, a snapshot or point from its frames), the page-level
//               comparison, each side's schema rebuilt in memory, the Core Data meaning
//   Backend/    where a repository's objects live: the contract (RepositoryBackend), Local/ (a
//               folder), S3/ (SigV4, the libcurl client, settings, the index cache, traffic)
//   Migration/  migration files and Swift stages, the history, the plan and its lint, the journal,
//               migrate, rollback, status
//   Policy/     the policy file format, its strict parser, check and explain
//   Purge/      the planner (pure over a schema), the delete graph, batch closures and each batch's
//               check against its own changes, the breaker, purge
//   Jobs/       cron expressions, crontab and systemd rendering, `storectl run`, the job log and its
//               rotation, metrics
//
// The storectl command (Sources/storectl) parses, calls one entry point here, and renders.
