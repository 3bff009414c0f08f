import StrataCodec
import StrataFileIO
import StrataLocks
import Foundation
import Testing
@testable import StrataWAL

/// A seeded generator of batches with the value shape of Benchmarks/README.md (half random bytes,
/// half repeated) unless asked for incompressible values.
struct BatchGenerator {
    var random: SplitMix64

    init(seed: UInt64) { random = SplitMix64(seed: seed) }

    mutating func bytes(_ count: Int) -> [UInt8] {
        (0..<count).map { _ in UInt8(truncatingIfNeeded: random.next()) }
    }

    mutating func value(_ count: Int, incompressible: Bool = false) -> [UInt8] {
        if incompressible { return bytes(count) }
        let half = count / 2
        return bytes(half) + [UInt8](repeating: UInt8(truncatingIfNeeded: random.next()), count: count - half)
    }

    /// One put whose value has `bytes` incompressible bytes.
    mutating func batchOf(bytes count: Int) -> WALBatch {
        var batch = WALBatch()
        batch.put(bytes(8), value(count, incompressible: true))
        return batch
    }

    mutating func batch(operations: Int = 0, maxValueBytes: Int = 200) -> WALBatch {
        let count = operations > 0 ? operations : Int(random.next() % 8) + 1
        var batch = WALBatch()
        for _ in 0..<count {
            let key = bytes(Int(random.next() % 24) + 1)
            let kind = random.next() % 5
            if kind == 0 {
                batch.delete(key)
            } else {
                let value = value(Int(random.next() % UInt64(maxValueBytes + 1)))
                batch.operations.append(kind == 1 ? .insert(key: key, value: value) : .put(key: key, value: value))
            }
        }
        return batch
    }
}

/// Opens the log in `/db/wal` of `fileSystem`, collecting what recovery replays.
func openLog(_ fileSystem: SimulatedFileSystem, options: WALOptions = WALOptions(segmentBytes: 64 << 10))
    throws -> (log: WriteAheadLog, records: [WALRecord], report: WALRecoveryReport) {
    var records: [WALRecord] = []
    let (log, report) = try WriteAheadLog.open(directory: "/db/wal", fileSystem: fileSystem, options: options) {
        records.append($0)
    }
    return (log, records, report)
}

/// Reads the log in `/db/wal` without changing it.
func readLog(_ fileSystem: any FileSystem, mode: RecoveryMode = .strict) throws -> ([WALRecord], WALRecoveryReport) {
    var records: [WALRecord] = []
    let report = try WriteAheadLog.read(directory: "/db/wal", fileSystem: fileSystem, mode: mode) { records.append($0) }
    return (records, report)
}

/// The only segment file of a log in `/db/wal`.
func firstSegmentPath(_ fileSystem: SimulatedFileSystem) throws -> String {
    let names = try fileSystem.contentsOfDirectory("/db/wal").filter { $0.hasSuffix(".seg") && !$0.contains("spare") }
    return "/db/wal/" + (try #require(names.first))
}

/// Recomputes the checksum of the frame at `offset` of a segment image after a test changed
/// its fields, so the frame verifies again and reaches the checks behind the checksum.
func resealFrame(_ bytes: inout [UInt8], at offset: Int) {
    let stored = bytes[(offset + 24)..<(offset + 28)].reversed().reduce(0) { $0 << 8 | Int($1) }
    let checksum = CRC32C.checksum(bytes[(offset + 4)..<(offset + WALFormat.frameHeaderBytes + stored)])
    withUnsafeBytes(of: checksum.littleEndian) { bytes.replaceSubrange(offset..<(offset + 4), with: $0) }
}
