// A store's vital signs, for `strata stat` and monitoring.
import Foundation
import StrataFileIO

/// What a store holds and where, at one moment.
public struct StoreStatus: Sendable {
    /// The latest published version, and the last one folded into the data file.
    public var version: UInt64
    public var checkpointVersion: UInt64
    /// Page size and pages of the data file as of the last checkpoint.
    public var pageBytes: Int
    public var pageCount: UInt64
    public var treeHeight: Int
    /// Changes held in memtables (not yet checkpointed).
    public var memtableKeys: Int
    public var memtableBytes: Int
    /// The log's segment files and their total size on disk.
    public var logSegments: [String]
    public var logBytes: Int
    /// The process that has the store open for writing (this one, for a writable store;
    /// nil when none does).
    public var writerProcess: Int32?
    /// The store's other open readers (FORMAT.md, "Reader table"), and the pages freed by
    /// checkpoints that wait for readers of older trees before they are reused.
    public var readers: [ReaderStatus] = []
    public var pagesHeldForReaders: UInt64 = 0
}

extension StorageEngine {
    /// The store's status now. Costs a stat of each log segment.
    public func status() throws -> StoreStatus {
        let state = snapshots.current
        let meta = checkpointLock.withLock { $0.meta }
        let (segments, logBytes) = try measuredLogSegments()
        let writerProcess: Int32? = if isReadOnly {
            readerTable.flatMap { $0.writerIsLive ? Int32(truncatingIfNeeded: $0.writerProcess) : nil }
        } else {
            ProcessInfo.processInfo.processIdentifier
        }
        return StoreStatus(version: state.version, checkpointVersion: meta.checkpointVersion, pageBytes: pageFile.pageBytes,
                           pageCount: meta.pageCount, treeHeight: Int(meta.height),
                           memtableKeys: state.active.count + (state.frozen?.count ?? 0),
                           memtableBytes: state.active.byteCount + (state.frozen?.byteCount ?? 0),
                           logSegments: segments, logBytes: logBytes, writerProcess: writerProcess, readers: readers,
                           pagesHeldForReaders: readerTable?.pinnedPages ?? 0)
    }

    /// The log's segments and their bytes. A background checkpoint may release a listed
    /// segment before it is measured: the segments are then listed again (up to three
    /// times; a writer's segment missing at the third is reported as damage). A read-only
    /// store passes over a segment its writer released since it read the log.
    private func measuredLogSegments() throws -> (segments: [String], bytes: Int) {
        var attempt = 1
        while true {
            let segments = logExtent.segmentPaths
            var bytes = 0
            var released = false
            for path in segments {
                do {
                    let file = try fileSystem.open(path, options: [])
                    bytes += Int(try file.size())
                    try file.close()
                } catch FileIOError.notFound where readerSlot != nil || attempt < 3 {
                    released = true
                } catch let error as FileIOError {
                    throw EngineError.io(error)
                }
            }
            if !released || readerSlot != nil { return (segments, bytes) }
            attempt += 1
        }
    }
}
