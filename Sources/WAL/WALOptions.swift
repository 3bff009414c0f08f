// Settings of a write-ahead log: durability, segment sizing, compression and the recovery
// mode used when it is opened.
import Logging

/// When `append` returns.
public enum Durability: Sendable, Equatable {
    /// After the fdatasync that covers the batch's frame succeeded: survives power loss.
    case full
    /// After the frame was written to the operating system: survives a process crash, not a
    /// power loss or an OS crash. `sync()` makes everything written so far durable.
    case relaxed
}

/// How recovery treats a frame that does not verify.
public enum RecoveryMode: Sendable, Equatable {
    /// Default. A bad frame that no later frame vouches for is a torn tail and is cut off;
    /// one that a later frame vouches for (it was once durable) is corruption: `open` throws.
    case strict
    /// Salvage: like `strict`, but corruption inside the last segment is cut off as if it
    /// were a torn tail, discarding the frames after it there.
    case tolerateCorruptedTail
    /// Salvage: stop at the first bad frame anywhere; everything after it, including later
    /// segment files, is discarded. The result is the state as of some earlier point.
    case pointInTime
    /// Salvage: skip every bad frame and keep each batch that verifies, leaving holes in the
    /// LSN sequence. The damaged segments stay until released, so reopening needs this mode
    /// again until then.
    case skipCorrupted
}

/// Settings of a write-ahead log.
public struct WALOptions: Sendable {
    /// When `append` returns. Default `.full`.
    public var durability: Durability = .full
    /// The largest size a segment file is preallocated to, so appends change no file size.
    /// Default 64 MiB; at least 4 KiB and at most 1 GiB.
    public var segmentBytes: Int = 64 << 20
    /// The size of a log's first segment, and of the first one after the log shrinks back:
    /// each later segment doubles it while writes go on, up to `segmentBytes`, so a small
    /// store keeps a small log. Default 32 KiB; at least 4 KiB (capped at `segmentBytes`).
    public var firstSegmentBytes: Int = 32 << 10
    /// How many released segment files are kept for reuse (already allocated and written
    /// once, they are the fastest to append to). Default 2.
    public var maxSpareSegments: Int = 2

    /// The size of the segment after one of `previousBytes` (0 for a log's first): double,
    /// from `firstSegmentBytes` up to `segmentBytes`.
    func nextSegmentBytes(after previousBytes: Int) -> Int {
        let first = min(firstSegmentBytes, segmentBytes)
        return previousBytes == 0 ? first : min(segmentBytes, max(first, previousBytes * 2))
    }
    /// Compress payloads with LZ4 when it makes them smaller. Default true.
    public var compression = true
    /// How recovery treats damage when the log is opened. Default `.strict`.
    public var recoveryMode: RecoveryMode = .strict
    /// The most bytes one group commit writes (a single larger batch is still one group).
    public var maxGroupBytes: Int = 4 << 20
    /// The LSN of the first batch when the directory holds no segment yet (a store whose
    /// data file already holds versions up to n starts its log at n + 1). Default 1.
    public var firstLSN = LSN(1)
    /// When set, the log must hold every batch from this LSN on (a store's log must
    /// continue its data file): segments that start after it mean batches are missing, and
    /// opening throws `WALError.missingData` before anything is written. Default nil.
    public var requiredFirstLSN: LSN?
    /// When set, opening passes only the batches from this LSN on to `replay`: earlier
    /// ones (a store's checkpointed batches) are checked by their frames' headers and
    /// checksums, which is all that telling a torn tail from corruption needs, but neither
    /// decompressed nor decoded. Default nil (every batch is replayed).
    public var replayFrom: LSN?
    /// How much of the log a checkpoint keeps as history after it no longer needs it for
    /// recovery (FORMAT.md, "History"): change feeds read it back, so a consumer that was
    /// away resumes across checkpoints and restarts. Default `.none` for a log of its own;
    /// a store's log (`EngineOptions.log`) keeps `HistoryRetention()`.
    public var history = HistoryRetention.none
    /// Where failed writes and fdatasyncs, recovery's cuts and released segments are
    /// logged. Default: `Logger.strataSilent` (nothing).
    public var logger = Logger.strataSilent

    public init(durability: Durability = .full, segmentBytes: Int = 64 << 20, recoveryMode: RecoveryMode = .strict) {
        self.durability = durability
        self.segmentBytes = segmentBytes
        self.recoveryMode = recoveryMode
    }

    /// The options of a store's log: the defaults, with history kept (`HistoryRetention()`).
    public static var storeDefault: WALOptions {
        var options = WALOptions()
        options.history = HistoryRetention()
        return options
    }

    /// Throws `WALError.invalidOptions` naming the setting that is out of range.
    func validate() throws(WALError) {
        guard segmentBytes >= 4096 && Int64(segmentBytes) <= WALFormat.maxSegmentFileBytes else {
            throw .invalidOptions("segmentBytes must be between 4096 and \(WALFormat.maxSegmentFileBytes) (got \(segmentBytes))")
        }
        guard firstSegmentBytes >= 4096 else {
            throw .invalidOptions("firstSegmentBytes must be at least 4096 (got \(firstSegmentBytes))")
        }
        guard maxSpareSegments >= 0 else { throw .invalidOptions("maxSpareSegments must not be negative") }
        guard maxGroupBytes > 0 else { throw .invalidOptions("maxGroupBytes must be positive") }
        guard firstLSN > .none else { throw .invalidOptions("firstLSN must be at least 1") }
    }
}

/// How much history a log keeps (`WALOptions.history`): the released segments are kept,
/// oldest dropped first, while they hold batches among the latest `versions` and take at
/// most `bytes` together. Reading history costs a read of the segments from the one that
/// holds the version asked for; keeping it costs their bytes on disk, so by default a store
/// starts keeping it only when a change feed is first opened on it (`start`).
public struct HistoryRetention: Sendable, Equatable {
    /// When a log starts keeping history.
    public enum Start: Sendable, Equatable {
        /// From the log's creation.
        case immediately
        /// From the first change feed opened on the store (`Store.changes(after:)`,
        /// `changes(of:since:)`), and from then on for good: a store that never serves a
        /// change feed keeps no history and pays nothing for it.
        case onFirstChangeFeed
    }

    /// How many of the latest versions history reaches back (at least). Default 8,640,000:
    /// a day of a store committing 100 units a second.
    public var versions: UInt64
    /// The most bytes the kept segments take together. Default 1 GiB.
    public var bytes: Int
    /// When the log starts keeping history. Default `.onFirstChangeFeed`.
    public var start: Start

    public init(versions: UInt64 = 8_640_000, bytes: Int = 1 << 30, start: Start = .onFirstChangeFeed) {
        self.versions = versions
        self.bytes = bytes
        self.start = start
    }

    /// No history: a checkpoint reuses or removes what it released.
    public static let none = HistoryRetention(versions: 0, bytes: 0)

    var isEnabled: Bool { versions > 0 && bytes > 0 }
}
