import CLibArchive
import CZstd
import Foundation

public enum StoreOpsVersion {
    /// storectl's version (the Debian package's too: `make deb` reads it here).
    public static let current = "0.1.0"

    /// What a bug report needs: storectl's version and the libraries it runs with, one per line.
    public static var report: String {
        """
        storectl \(current)
        SQLite \(StoreConnection.sqliteVersion)
        \(String(cString: archive_version_details()))
        zstd \(String(cString: ZSTD_versionString()))
        """
    }
}
