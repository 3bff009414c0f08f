// The mutable state of an open log, guarded by `WriteAheadLog.monitor`, and the segment
// being appended to.
import StrataCodec
import StrataFileIO
import StrataLocks

/// A segment of the log that recovery still needs.
struct Segment {
    var sequence: UInt64
    var path: String
    var firstLSN: LSN
}

/// The segment appends go to.
struct ActiveSegment {
    var handle: any OpenFile
    var sequence: UInt64
    var path: String
    var salt: UInt32
    /// Where the next frame goes.
    var offset: Int
    /// The file's allocated size: appends that fit change no file size.
    var capacity: Int
    /// Bytes from the file's start this log has written (header, frames, and zeros
    /// written ahead of them): an fdatasync after writes below it changes no extent of
    /// the file (`WriteAheadLog.zeroAheadBytes`). A spare's old bytes are not counted.
    var written: Int

    /// Starts segment `sequence` with its first frame at `firstLSN`, sized to follow one of
    /// `previousBytes` (0: the first of a log, or after it shrank back) and for at least
    /// `minimumBytes` of frames, reusing a spare file when one is given.
    /// Starts segment `sequence`: sized after one of `previousBytes` (see
    /// `WALOptions.nextSegmentBytes`), or `WALFormat.smallestSegmentBytes` when `smallest`.
    static func start(sequence: UInt64, firstLSN: LSN, previousBytes: Int, minimumBytes: Int, files: SegmentFiles,
                      options: WALOptions, reusing spare: String?, smallest: Bool = false) throws -> ActiveSegment {
        var generator = SystemRandomNumberGenerator()
        let salt = UInt32.random(in: 1...UInt32.max, using: &generator)
        let size = smallest ? WALFormat.smallestSegmentBytes : options.nextSegmentBytes(after: previousBytes)
        let capacity = max(size, WALFormat.segmentHeaderBytes + minimumBytes)
        let header = SegmentHeader(salt: salt, sequence: sequence, firstLSN: firstLSN, capacityBytes: UInt64(capacity))
        let handle = try files.create(header, reusing: spare)
        return ActiveSegment(handle: handle, sequence: sequence, path: files.path(ofSegment: sequence), salt: salt,
                             offset: WALFormat.segmentHeaderBytes, capacity: max(capacity, Int(try handle.size())),
                             written: WALFormat.segmentHeaderBytes)
    }
}

/// A batch waiting for a group commit.
struct PendingBatch {
    var lsn: LSN
    var encoded: EncodedBatch
}

struct WriterState {
    /// The LSN the next appended batch gets (WriteAheadLog.W1).
    var nextLSN: LSN
    /// Batches waiting for a leader, in LSN order.
    var queue: [PendingBatch] = []
    /// The threads in `waitUntilDone` asleep, each with the LSN it waits for: woken one by
    /// one (`WriteAheadLog.wakeWaiters()`), when their batch is done or when one must lead.
    var sleepers: [(lsn: LSN, sleeper: Sleeper)] = []
    /// Sleepers taken off `sleepers` to be woken once the monitor is released
    /// (`wakeWaiters(afterUnlock:)`).
    var wakes: [Sleeper] = []
    /// An empty array the next group takes the queue's place with (`commitGroup`), so
    /// that the queue keeps its capacity from group to group.
    var spareQueue: [PendingBatch] = []
    /// A leader is doing I/O (a group commit, a sync, a rotation or a shrink).
    var flushing = false
    /// A checkpoint is releasing segments (renames, removals, directory syncs). Group
    /// commits go on meanwhile (they append to a segment it never releases); whatever
    /// replaces or lists the segments (a shrink, a close, `extent()`, another release)
    /// waits for it: releases a few milliseconds each, and commits waited behind them.
    var releasing = false
    /// Whether released segments go to history (WALOptions.history, FORMAT.md "History").
    var keepsHistory = false
    var writtenLSN: LSN
    var durableLSN: LSN
    /// Set once by the first failed write or sync (WriteAheadLog.W6).
    var failure: FileIOError?
    /// The LSNs of the group whose write or sync failed: their outcome is unknown.
    var unknownOutcome: ClosedRange<UInt64>?
    var closed = false
    /// A checkpoint holds every batch through this LSN: the first group after it starts a
    /// new segment, so the one before can be released (`rotate(after:)`).
    var rotateAfter: LSN?
    var active: ActiveSegment
    var segments: [Segment]
    var spares: [String]
    var statistics: WALStatistics
    /// The LSN ranges of the latest group commits, oldest first (a ring of at most
    /// `recentGroupLimit`), so a waiter can learn the size of its group.
    private var recentGroups: [ClosedRange<UInt64>] = []
    private var nextGroupSlot = 0

    static let recentGroupLimit = 1024

    init(nextLSN: LSN, writtenLSN: LSN, durableLSN: LSN, active: ActiveSegment, segments: [Segment],
         spares: [String], statistics: WALStatistics) {
        self.nextLSN = nextLSN
        self.writtenLSN = writtenLSN
        self.durableLSN = durableLSN
        self.active = active
        self.segments = segments
        self.spares = spares
        self.statistics = statistics
    }
}

extension WriterState {
    mutating func rememberGroup(_ lsns: ClosedRange<UInt64>) {
        if recentGroups.count < Self.recentGroupLimit {
            recentGroups.append(lsns)
        } else {
            recentGroups[nextGroupSlot] = lsns
        }
        nextGroupSlot = (nextGroupSlot + 1) % Self.recentGroupLimit
    }

    /// The batch count of the remembered group holding `lsn`, or 0. Searches newest first:
    /// a waiter usually asks right after its group finished.
    func groupSize(containing lsn: LSN) -> Int {
        var slot = nextGroupSlot
        for _ in 0..<recentGroups.count {
            slot = (slot + recentGroups.count - 1) % recentGroups.count
            let lsns = recentGroups[slot]
            if lsns.contains(lsn.rawValue) { return lsns.count }
            if lsns.upperBound < lsn.rawValue { return 0 }
        }
        return 0
    }
}
