// The engines under test. Until the engine and contexts land, `strata` measures Strata's
// commit path as far as it exists: one WAL batch per transaction, group commit, LZ4.
// `fdatasync` is the physical limit: 16 + V bytes appended to a preallocated file and one
// fdatasync per transaction, nothing else.
import FileIO
import Foundation
import Synchronization
import WAL
#if canImport(Glibc)
import Glibc
#endif

protocol Engine: Sendable {
    /// Commits `keys` (numbers) with their values as one durable transaction.
    func commit(_ keys: Range<Int>, values: [[UInt8]]) throws
    func finish() throws -> (bytesOnDisk: Int, fdatasyncs: Int, compressionRatio: Double)
}

/// Strata's write-ahead log: each transaction one batch, appended with group commit.
final class WALEngine: Engine {
    let log: WriteAheadLog
    let directory: String

    init(directory: String, durability: Durability) throws {
        self.directory = directory
        (log, _) = try WriteAheadLog.open(directory: directory, options: WALOptions(durability: durability))
    }

    func commit(_ keys: Range<Int>, values: [[UInt8]]) throws {
        var batch = WALBatch()
        for (index, key) in keys.enumerated() { batch.put(Workload.key(key), values[index]) }
        try log.append(batch)
    }

    func finish() throws -> (bytesOnDisk: Int, fdatasyncs: Int, compressionRatio: Double) {
        let statistics = log.statistics
        try log.close()
        return (statistics.bytesWritten, statistics.syncCount, statistics.compressionRatio)
    }
}

/// The disk's own limit: append and fdatasync, once per transaction.
final class FdatasyncEngine: Engine {
    let file: any OpenFile
    let offset = Mutex(0)
    let syncs = Mutex(0)

    init(directory: String, capacityBytes: Int) throws {
        try POSIXFileSystem().createDirectory(directory)
        file = try POSIXFileSystem().open(directory + "/raw", options: [.create, .write, .truncate])
        try file.allocate(offset: 0, length: Int64(capacityBytes))
        try file.sync()
    }

    func commit(_ keys: Range<Int>, values: [[UInt8]]) throws {
        var bytes: [UInt8] = []
        for (index, key) in keys.enumerated() { bytes += Workload.key(key) + values[index] }
        let at = offset.withLock { value in defer { value += bytes.count }; return value }
        try file.write(bytes, at: Int64(at))
        try file.syncData()
        syncs.withLock { $0 += 1 }
    }

    func finish() throws -> (bytesOnDisk: Int, fdatasyncs: Int, compressionRatio: Double) {
        try file.close()
        return (offset.withLock { $0 }, syncs.withLock { $0 }, 1)
    }
}
