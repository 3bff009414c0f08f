// Counters a write-ahead log keeps about its own work, for benchmarks, the `strata` tool and
// tests that count I/O per commit.

/// What a log has done since it was opened.
public struct WALStatistics: Sendable, Equatable {
    /// All zero: a log that has done nothing.
    public init() {}

    /// Batches appended (acknowledged or not).
    public var appendCount = 0
    /// Group commits: each is one write (one per 256 KiB of a larger group), and in
    /// `.full` mode one fdatasync.
    public var groupCount = 0
    /// fdatasync calls on segment files (group commits, `sync()`, sealing at rotation, open).
    public var syncCount = 0
    /// Segment files started (created or reused).
    public var segmentsStarted = 0
    /// Segment files released by `releaseSegments(through:)`.
    public var segmentsReleased = 0
    /// Encoded batch bytes appended, and the bytes stored for them after LZ4.
    public var rawBytes = 0
    public var storedBytes = 0
    /// Bytes written to segment files by group commits (frame headers and padding included).
    public var bytesWritten = 0
    /// The largest group committed, in batches.
    public var largestGroup = 0

    /// Stored bytes per encoded byte (below 1 when LZ4 helps).
    public var compressionRatio: Double { rawBytes == 0 ? 1 : Double(storedBytes) / Double(rawBytes) }
}
