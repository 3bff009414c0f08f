// What an application or tool asks of the storage beneath its store: a checkpoint now, the
// store's status, a verification of its data file, a backup or a compacted copy, and how
// far back the log's history reaches. These go through the store, never through the
// engine itself: the engine's commit path stays beneath contexts (docs/public-api.md).
//
// Each call blocks its thread on disk I/O (a checkpoint syncs the data file twice, a copy
// syncs every file it writes): call them from a thread of your own (a `Thread` or a
// dispatch queue), not from the main actor or a task of the cooperative pool.
import StrataEngine
import StrataWAL

extension Store {
    /// Whether the store's data lives in files of its own (`Store.open`, `Store.inMemory`),
    /// as opposed to another system that holds it (a store over etcd).
    public var isEmbedded: Bool { backend === engine }

    /// Folds the changes held in memory into the data file now and releases the log
    /// segments that covered them, instead of waiting for the thresholds in `EngineOptions`.
    /// A store over etcd folds its local replica only. Throws `EngineError` (`.readOnly`
    /// for a read-only store, `.closed` after `close()`); an I/O failure stops the store.
    public func checkpoint() throws {
        try engine.checkpoint()
    }

    /// What the store holds and where, now: versions, pages, memtable and log sizes. For a
    /// store over etcd, the status of its local replica. Costs a stat of each log segment.
    public func status() throws -> StoreStatus {
        try engine.status()
    }

    /// Checks the durable data file, the last checkpoint's tree and free list (checksums,
    /// key order, page accounting), while commits continue; `progress` gets the pages
    /// checked so far and the file's page count. Problems are listed in the report
    /// (`isValid`, `problems`), never thrown. O(pages).
    public func verify(progress: (_ checked: Int, _ pageCount: Int) -> Void = { _, _ in }) -> VerifyReport {
        engine.verify(progress: progress)
    }

    /// Writes a consistent copy of the store's files into the new directory `destination`
    /// while commits continue; opening the copy recovers the version reported. Until the
    /// copy is whole an `INCOMPLETE` file marks it and every open refuses it. Throws
    /// `EngineError` (`.notEmbedded` for a store over etcd or in memory: neither has files
    /// on disk to copy).
    @discardableResult
    public func backup(to destination: String,
                       progress: (_ copied: Int, _ total: Int) -> Void = { _, _ in }) throws -> CopyReport {
        try requireFilesOnDisk(for: "backup(to:)")
        return try engine.backup(to: destination, progress: progress)
    }

    /// Writes a new store into the new directory `destination` holding only the live keys
    /// of the latest version (no free pages, no deleted keys, no log history), while commits
    /// continue. `progress` gets the keys copied so far. Throws `EngineError`
    /// (`.notEmbedded` for a store over etcd or in memory).
    @discardableResult
    public func compact(to destination: String, progress: (Int) -> Void = { _ in }) throws -> CopyReport {
        try requireFilesOnDisk(for: "compact(to:)")
        return try engine.compact(to: destination, progress: progress)
    }

    /// A copy of an in-memory store would be written into its simulated file system, where
    /// no one could open it, and a store over etcd has no files here at all: both refuse.
    private func requireFilesOnDisk(for operation: String) throws {
        guard isEmbedded, !isInMemory else {
            throw EngineError.notEmbedded(operation: operation, location: isInMemory ? "in memory" : backend.location)
        }
    }

    /// The oldest version whose batch the log itself holds (what recovery replays from);
    /// checkpoints move it forward. History reaches further back: `oldestHistoryVersion`.
    public var oldestLoggedVersion: UInt64 { engine.oldestLoggedVersion }

    /// The oldest version whose changes the log or its history still holds
    /// (`WALOptions.history`): `changes(after: v)` and `changes(of:since: v)` replay history
    /// when `v + 1` is at or after it, and throw `EngineError.historyUnavailable` otherwise.
    public var oldestHistoryVersion: UInt64 {
        get throws { try engine.oldestHistoryVersion }
    }

    /// What the write-ahead log did since the store was opened: commits, group commits,
    /// fdatasyncs, bytes before and after compression. All zero for a read-only store; for a
    /// store over etcd, its local replica's log.
    public var logStatistics: WALStatistics { engine.logStatistics }
}
