// StoreOps: the library behind storectl. Folders are the nouns of the domain:
//   Support/    errors and exit statuses, signals, atomic files, hashing, formatting
//   Store/      validating and opening stores, their state, SQLite's locks, the job lock
//   CoreData/   Z_METADATA, Z_PRIMARYKEY, Z_MODELCACHE, entity counts and orphans
//   Manifest/   the description of every copy storectl makes
//   Backup/     the consistent-copy engine and `storectl backup`
//   Preflight/  checks before anything risky
