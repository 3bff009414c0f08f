// Opening a store over etcd: `Store.open(etcd:prefix:)`. Everything after the open is the
// same API as an embedded store: contexts, units of work, repositories, observation.
import StrataContexts
import StrataEngine

extension Store {
    /// Opens the store kept in etcd v3 (3.4 or later) under `prefix`, at `endpoints` (its
    /// client URLs, such as `http://127.0.0.1:2379`; the next one is tried when one cannot
    /// be reached). Loads the prefix's keys into memory at etcd's current revision and
    /// keeps them current through etcd's Watch, so reads never wait for the network.
    ///
    /// What changes against an embedded store: a root commit is one etcd transaction (a
    /// network round trip and a Raft commit, instead of an fdatasync), within the server's
    /// `--max-txn-ops` and `--max-request-bytes` (`EtcdOptions`); a commit whose
    /// connection is lost after sending is `EtcdError.commitOutcomeUnknown`; a new context
    /// reads the latest revision this process has seen, which may trail another process's
    /// commit by the watch's delay (a commit against it conflicts and `write(retries:)`
    /// runs again); versions are this process's own, one per etcd revision that changed
    /// the prefix; the store's data must fit in memory.
    ///
    /// Throws `EtcdError` (`.invalidConfiguration` for an empty prefix or a URL that is not
    /// `http://`, `.unreachable` when no endpoint answers).
    public static func open(etcd endpoints: [String], prefix: String, options: EtcdOptions = EtcdOptions()) async throws -> Store {
        guard !prefix.isEmpty else {
            throw EtcdError.invalidConfiguration("the prefix is empty; give each store its own, such as \"myapp/\"")
        }
        let client = try EtcdClient(endpoints: endpoints, options: options, prefix: prefix)
        let (backend, report) = try await EtcdBackend.open(client: client, prefix: Array(prefix.utf8))
        return Store(backend: backend, report: report, isInMemory: false)
    }
}
