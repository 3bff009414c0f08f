// The storage engine beneath a store, for tests and benchmarks that measure or examine it
// below contexts (strata-bench's key/value workloads commit plain batches, read through
// snapshots and scan with cursors, as other engines' benchmarks do). Not API
// (docs/public-api.md): a commit through the engine skips the contexts' conflict checks,
// the records' index and relationship upkeep and, on a store over etcd, the backend.
// `import Strata` does not show any of it; a store's own engine takes
// `@_spi(StorageEngine) import StrataTesting` on top.
@_exported import class StrataEngine.StorageEngine
@_exported import class StrataEngine.Snapshot
@_exported import struct StrataEngine.SnapshotCursor
@_exported import struct StrataEngine.KeyRange
@_exported import struct StrataEngine.CommitResult
@_exported import struct StrataWAL.WALBatch
import StrataContexts

extension Store {
    /// The engine this store reads from and commits to (for a store over etcd, its local
    /// replica). Commit through contexts; this is for measuring and examining the engine.
    @_spi(StorageEngine) public var storageEngine: StorageEngine { engine }
}
