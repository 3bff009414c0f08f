// Constants of the write-ahead log's on-disk format. Every value here is on disk: changing
// one is a format change (FORMAT.md, "Write-ahead log", and a version bump).

/// The write-ahead log's on-disk constants.
package enum WALFormat {
    /// Segment magic: the ASCII bytes "STRATWAL".
    package static let magic: [UInt8] = Array("STRATWAL".utf8)
    /// The segment format version this code writes and the newest it reads.
    package static let version: UInt16 = 2
    /// Size of the segment header; the first frame starts here.
    package static let segmentHeaderBytes = 64
    /// The smallest segment file: what a closed, checkpointed log keeps.
    package static let smallestSegmentBytes = 4096
    /// Size of a frame header.
    package static let frameHeaderBytes = 40
    /// Frames start at offsets that are multiples of this.
    package static let frameAlignment = 8
    /// The most raw (uncompressed) bytes one frame carries; larger batches are fragmented.
    package static let maxFragmentBytes = 1 << 20
    /// The largest encoded batch the log accepts (and a reader believes).
    package static let maxBatchBytes = 256 << 20
    /// The longest key an operation carries (keys are 1 to this many bytes): a reader
    /// refuses a batch with a longer one the moment it reads the key's length.
    package static let maxKeyBytes = 768
    /// The longest value an operation carries.
    package static let maxValueBytes = 64 << 20
    /// The largest segment file a reader loads (a batch of the maximum size, fragmented,
    /// fits in one segment with room to spare).
    package static let maxSegmentFileBytes: Int64 = 1 << 30
    /// Segment sequence numbers stay below this (one segment a nanosecond would take 146
    /// years to reach it); a larger one is damage, and it leaves room to count on safely.
    package static let maxSegmentSequence: UInt64 = 1 << 62

    /// LSNs stay below this (as a data file's versions do): a larger one in a header is
    /// damage, and the LSNs after it can be counted without overflow.
    package static let lsnLimit: UInt64 = 1 << 63

    /// Frame flag bit 0: the payload is an LZ4 block.
    static let compressedFlag: UInt8 = 1

    /// Operation kinds in a batch.
    static let putOperation: UInt8 = 1
    static let deleteOperation: UInt8 = 2
    /// A put of a key the store did not hold (format version 2 on).
    static let insertOperation: UInt8 = 3

    /// Padded size of a frame with `payloadBytes` stored bytes.
    static func frameBytes(payloadBytes: Int) -> Int {
        let raw = frameHeaderBytes + payloadBytes
        return (raw + frameAlignment - 1) / frameAlignment * frameAlignment
    }
}

/// Where a frame stands in its batch.
enum FragmentKind: UInt8 {
    /// The whole batch.
    case full = 1
    /// The first fragment of a batch larger than one frame.
    case first = 2
    /// A fragment between the first and the last.
    case middle = 3
    /// The last fragment.
    case last = 4
}
