// What reading a log found: the batches (through a visitor), a report for people, and the
// tail where appending resumes.
import StrataCodec

/// One batch read back from the log.
package struct WALRecord: Sendable {
    /// The batch's LSN.
    package let lsn: LSN
    /// The segment file holding its first frame, and that frame's offset.
    package let path: String
    package let offset: Int64
    /// Frames the batch took, its encoded size, and the bytes stored for it (after LZ4).
    package let frameCount: Int
    package let rawBytes: Int
    package let storedBytes: Int
    /// The operations the batch holds (checked when it was read).
    package let operationCount: Int
    /// The batch's bytes as they are kept: decoded for a batch of one frame, as stored
    /// (each frame's payload) for a larger one, decoded again one frame at a time when its
    /// operations are read. A record holds at most its stored bytes and one frame's.
    let body: Body

    enum Body: Sendable {
        case whole([UInt8])
        case fragments([Fragment])
    }

    /// One frame's payload of a batch of several frames.
    struct Fragment: Sendable {
        let payload: [UInt8]
        let rawBytes: Int
        let compressed: Bool

        /// The fragment's decoded bytes.
        func withDecoded<T>(_ body: (UnsafeRawBufferPointer) throws -> T) throws -> T {
            guard compressed else { return try payload.withUnsafeBytes(body) }
            return try LZ4Block.decompress(payload, decompressedCount: rawBytes).withUnsafeBytes(body)
        }
    }

    /// The operations, copied out.
    package var batch: WALBatch {
        var operations: [WALBatch.Operation] = []
        operations.reserveCapacity(operationCount)
        forEachOperation { kind, key, value in operations.append(WALBatch.Operation(kind: kind, key: key, value: value)) }
        return WALBatch(operations)
    }

    /// The batch as the memtable takes it: its encoded bytes (those of a batch of one frame
    /// shared, not copied) and where each operation lies in them, found in one pass. `batch`
    /// copies every key and value into arrays of their own, and its `encoding()` copies them
    /// back: a reader process following its writer spent more than a tenth of its time on
    /// those copies and their allocations (Benchmarks/JOURNAL.md, "What reader processes
    /// cost a writer, found, and a replay that does less").
    package var encoding: WALBatch.Encoding {
        let bytes: [UInt8]
        switch body {
        case let .whole(whole):
            bytes = whole
        case let .fragments(fragments):
            var joined: [UInt8] = []
            joined.reserveCapacity(rawBytes)
            for fragment in fragments {
                do { try fragment.withDecoded { joined.append(contentsOf: $0) } } catch {
                    decodedOnlyOnce(error)
                }
            }
            bytes = joined
        }
        var locations: [WALBatch.OperationLocation] = []
        locations.reserveCapacity(operationCount)
        bytes.withUnsafeBytes { encoded in
            // Fed whole, the stream hands out every key and value where it lies in `encoded`.
            var stream = BatchStream(batchBytes: bytes.count)
            func range(_ part: UnsafeRawBufferPointer) -> Range<Int> {
                let start = part.baseAddress! - encoded.baseAddress!
                return start..<(start + part.count)
            }
            do {
                try stream.feed(encoded) { kind, key, value in
                    locations.append(WALBatch.OperationLocation(kind: kind, key: range(key), value: value.map(range)))
                }
                try stream.finish()
            } catch {
                decodedOnlyOnce(error)
            }
        }
        return WALBatch.Encoding(bytes: bytes, operationLocations: locations)
    }

    /// Traps: the batch's bytes passed every check when it was read (WALReader), so they
    /// decode again the same way; failing now is a fault of Strata's, not of the file.
    private func decodedOnlyOnce(_ error: any Error) -> Never {
        preconditionFailure("the batch of \(lsn) decoded when it was read, but not again: \(error)")
    }

    /// Calls `body` with each operation's kind, key and value (nil for a delete), valid
    /// during the call only, in commit order; throws what `body` throws. The bytes were
    /// checked when the batch was read: they decode again the same way.
    package func forEachOperation<E: Error>(
        _ body: (_ kind: UInt8, _ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer?) throws(E) -> Void
    ) throws(E) {
        var stream = BatchStream(batchBytes: rawBytes)
        do {
            switch self.body {
            case let .whole(bytes):
                try bytes.withUnsafeBytes { try stream.feed($0) { kind, key, value in try body(kind, key, value) } }
            case let .fragments(fragments):
                for fragment in fragments {
                    try fragment.withDecoded { try stream.feed($0) { kind, key, value in try body(kind, key, value) } }
                }
            }
            try stream.finish()
        } catch let error as E {
            throw error
        } catch {
            decodedOnlyOnce(error)
        }
    }
}

/// A batch read after damage that a salvage mode stepped over: what the store got from the
/// rest of the log, so that an operator sees what a damaged (or forged) stretch held.
public struct WALBatchAfterDamage: Sendable, Equatable, CustomStringConvertible {
    public enum Outcome: Sendable, Equatable {
        /// The batch verified and decoded, and was replayed.
        case applied
        /// Its frames verified but the batch does not decode (the reason says why): it was
        /// left out.
        case skipped(reason: String)
    }

    public let lsn: LSN
    /// The segment file holding its first frame, and that frame's offset.
    public let path: String
    public let offset: Int64
    /// Operations the batch holds (0 for a skipped batch).
    public let operationCount: Int
    public let outcome: Outcome

    public var description: String {
        switch outcome {
        case .applied: "applied \(lsn) (\(operationCount) operations) at offset \(offset) of \(path)"
        case let .skipped(reason): "skipped \(lsn) at offset \(offset) of \(path): \(reason)"
        }
    }
}

/// Damage found while reading the log: a torn tail that was cut off, a segment cut short,
/// damage in batches the data file already holds, or corruption that a salvage mode
/// stepped over.
public struct WALDamage: Sendable, Equatable, CustomStringConvertible {
    /// What the damage is, and so what it may have cost.
    public enum Kind: Sendable, Equatable {
        /// Bytes after the last whole frame that no later frame vouches for: the remains of a
        /// group whose write was interrupted. Such a group was normally never acknowledged,
        /// but a damaged last group looks the same, so acknowledged commits may be in it.
        case tornTail
        /// A frame that later frames vouch for (it was once durable) does not verify.
        case corruption
        /// The segment file is shorter than its header says it was made: its end was cut off,
        /// and the batches there (acknowledged ones included) are gone.
        case truncated
        /// The damaged frames hold only batches the data file's checkpoint already holds:
        /// nothing is lost.
        case covered
    }

    /// The segment file and the offset of the first byte that did not verify.
    public let path: String
    public let offset: Int64
    /// The LSN the reader expected there.
    public let expectedLSN: LSN
    /// What was wrong.
    public let reason: String
    public let kind: Kind
    /// Bytes discarded at this place.
    public let byteCount: Int

    /// Whether later frames vouch that this data was once durable (corruption).
    public var isCorruption: Bool { kind == .corruption }
    /// Whether the damage may have cost acknowledged commits (everything but `.covered`).
    public var mayHaveLostCommits: Bool { kind != .covered }

    public var description: String {
        let what = switch kind {
        case .tornTail: "torn tail"
        case .corruption: "corruption"
        case .truncated: "segment cut short"
        case .covered: "damage in checkpointed batches (the data file holds them; nothing lost)"
        }
        return "\(what) at offset \(offset) of \(path) (expected \(expectedLSN)): \(reason); \(byteCount) bytes discarded"
    }
}

/// What recovery found when a log was opened or read.
public struct WALRecoveryReport: Sendable {
    /// Segment files read.
    public var segmentCount = 0
    /// The LSN of the first and the last batch read (`.none` when the log holds none).
    public var firstLSN = LSN.none
    public var lastLSN = LSN.none
    /// Batches and frames read, and their encoded and stored bytes.
    public var batchCount = 0
    public var frameCount = 0
    public var rawBytes = 0
    public var storedBytes = 0
    /// Torn tails cut off and corruption stepped over (salvage modes only).
    public var damage: [WALDamage] = []
    /// Segment files removed by `.pointInTime` recovery, and leftover temporary files removed.
    public var discardedFiles: [String] = []
    /// In a salvage mode, every batch read after the first damage that may have cost
    /// commits: each one replayed, and each one whose frames verify but which does not
    /// decode, left out.
    public var batchesAfterDamage: [WALBatchAfterDamage] = []

    /// Bytes discarded by recovery.
    public var discardedBytes: Int { damage.reduce(0) { $0 + $1.byteCount } }
}

/// Where appending resumes after recovery.
struct WALTail {
    /// The segments that remain, oldest first.
    var segments: [(sequence: UInt64, path: String, firstLSN: LSN)]
    /// The last segment's salt and the offset just after its last kept frame.
    var salt: UInt32
    var offset: Int
    /// Whether bytes after `offset` of the last segment could still verify (remnants of a
    /// torn group, or damage cut off), so that appends must start a new segment instead.
    var needsNewSegment: Bool
    /// Segment files after the cut that `.pointInTime` recovery discards.
    var discardedSegments: [String]
    /// Frames that no later frame vouches were durable (their LSN is above every durable
    /// LSN the log records): a writer rewrites and syncs them before appending, since a
    /// failed fdatasync may have left them only in the page cache.
    var unproven: [FrameExtent]
    /// Leftover temporary files and spares.
    var temporaries: [String]
    var spares: [String]
    /// The LSN the next batch gets.
    var nextLSN: LSN
}

/// Where one frame lies: its segment, its offset and where it ends.
struct FrameExtent: Equatable {
    var path: String
    var offset: Int
    var end: Int
    var lsn: LSN
}
