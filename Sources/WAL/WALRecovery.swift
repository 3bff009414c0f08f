// What reading a log found: the batches (through a visitor), a report for people, and the
// tail where appending resumes.

/// One batch read back from the log.
public struct WALRecord: Sendable {
    /// The batch's LSN.
    public let lsn: LSN
    /// The operations.
    public let batch: WALBatch
    /// The segment file holding its first frame, and that frame's offset.
    public let path: String
    public let offset: Int64
    /// Frames the batch took, its encoded size, and the bytes stored for it (after LZ4).
    public let frameCount: Int
    public let rawBytes: Int
    public let storedBytes: Int
}

/// Damage found while reading the log: a torn tail that was cut off, or corruption that a
/// salvage mode stepped over.
public struct WALDamage: Sendable, Equatable, CustomStringConvertible {
    /// The segment file and the offset of the first byte that did not verify.
    public let path: String
    public let offset: Int64
    /// The LSN the reader expected there.
    public let expectedLSN: LSN
    /// What was wrong.
    public let reason: String
    /// Whether later frames vouch that this data was once durable (corruption) or not (a torn tail).
    public let isCorruption: Bool
    /// Bytes discarded at this place.
    public let byteCount: Int

    public var description: String {
        "\(isCorruption ? "corruption" : "torn tail") at offset \(offset) of \(path) (expected \(expectedLSN)): "
            + "\(reason); \(byteCount) bytes discarded"
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
    /// Leftover temporary files and spares.
    var temporaries: [String]
    var spares: [String]
    /// The LSN the next batch gets.
    var nextLSN: LSN
}
