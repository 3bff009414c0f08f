// A store's vital signs, for `strata stat` and monitoring.
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
}

extension StorageEngine {
    /// The store's status now. Costs a stat of each log segment.
    public func status() throws -> StoreStatus {
        let state = stateLock.withLock { $0.current }
        let meta = checkpointLock.withLock { $0.meta }
        let segments = logExtent.segmentPaths
        var logBytes = 0
        for path in segments {
            do {
                let file = try fileSystem.open(path, options: [])
                logBytes += Int(try file.size())
                try file.close()
            } catch let error as FileIOError {
                throw EngineError.io(error)
            }
        }
        return StoreStatus(version: state.version, checkpointVersion: meta.checkpointVersion, pageBytes: pageFile.pageBytes,
                           pageCount: meta.pageCount, treeHeight: Int(meta.height),
                           memtableKeys: state.active.count + (state.frozen?.count ?? 0),
                           memtableBytes: state.active.byteCount + (state.frozen?.byteCount ?? 0),
                           logSegments: segments, logBytes: logBytes)
    }
}
