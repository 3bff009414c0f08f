// The storage seam: what contexts, units of work, repositories, indexes, observation and
// the change feed need from storage, and nothing more.
//
//  - Reads and range scans at a snapshot version come from a local `StorageEngine`
//    (`Snapshot` is a concrete type, so a read is a direct call on every backend). On the
//    embedded backend that engine is the store itself; a networked backend keeps it as a
//    replica of its data, current to some version, and makes it move only forward, whole
//    commits at a time.
//  - A root commit hands the backend a write set read at a snapshot, and the key ranges it
//    depends on without writing them; the backend checks both against everything committed
//    after that snapshot (first committer wins, except the `unchecked` keys), makes the
//    write set durable, and returns once the local engine shows it.
//  - Committed versions reach observers and change feeds through the local engine's
//    commit hook and log (`observeCommits`, `history`), on every backend alike.
//
// The store calls `commit` through an existential once per root commit and never per read;
// strata-bench measures the embedded path (Benchmarks/JOURNAL.md).
import StrataEngine
import StrataWAL

/// The storage beneath a `Store`: the embedded `StorageEngine`, or another implementation
/// in this package (StrataEtcd).
package protocol StorageBackend: AnyObject, Sendable {
    /// The engine snapshots are read from.
    var localEngine: StorageEngine { get }

    /// Makes `batch`, read at `snapshot`, durable as one commit once no key of it outside
    /// `unchecked`, and no key in `readRanges` (ranges the batch depends on without writing
    /// them), was written by another commit after `snapshot`, and returns when new
    /// snapshots of `localEngine` show it. Throws `EngineError.conflict` naming such keys
    /// (nothing written), an error whose `CommitOutcomeReporting.isCommitOutcomeUnknown`
    /// is true when the commit may or may not have been made durable, or another error
    /// when nothing was written.
    /// Blocks the calling thread meanwhile.
    func commit(_ batch: WALBatch, readAt snapshot: Snapshot, unchecked: Set<[UInt8]>, readRanges: [KeyRange]) throws -> CommitResult

    /// `commit` for async code: suspends, never blocking a thread of the cooperative pool.
    func commit(_ batch: WALBatch, readAt snapshot: Snapshot, unchecked: Set<[UInt8]>, readRanges: [KeyRange]) async throws -> CommitResult

    /// Stops the backend; later commits throw `EngineError.closed`.
    func close() throws

    /// Where the store lives, for descriptions ("/path", "etcd http://host:2379 prefix app/").
    var location: String { get }
}

/// A backend's error that says whether the commit may or may not have been made durable:
/// then the caller must look (a later read shows it or not), never assume either.
/// Unit-of-work failures with such a cause are `CommitFailure.outcomeUnknown`.
package protocol CommitOutcomeReporting: Error {
    var isCommitOutcomeUnknown: Bool { get }
}

extension StorageEngine: StorageBackend {
    package var localEngine: StorageEngine { self }

    package var location: String { path }

    /// `close(checkpoint: true)`: what a store's close does.
    package func close() throws { try close(checkpoint: true) }
}
