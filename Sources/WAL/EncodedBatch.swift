// A batch made ready for the log before any lock is taken: encoded, cut into fragments of
// at most `WALFormat.maxFragmentBytes` raw bytes, and each fragment LZ4-compressed, or
// stored raw when compression does not make it smaller (FORMAT.md, "Payload").
// Only the header fields that depend on the log's state (LSN, durable LSN, salt) are left
// for the group-commit leader to fill in.
import StrataCodec

struct EncodedBatch {
    struct Fragment {
        /// Where its stored payload (an LZ4 block, or the raw bytes) lies in `payloads`.
        var stored: Range<Int>
        var rawBytes: Int
        var compressed: Bool
        var kind: FragmentKind
    }

    /// Every fragment's stored payload, one after another.
    var payloads: [UInt8]
    /// The first fragment, the only one of a batch up to `WALFormat.maxFragmentBytes`.
    var first: Fragment
    /// The fragments after the first: none for most batches, which so allocate one array
    /// (their payload) rather than three.
    var later: [Fragment]
    /// The batch's encoded (uncompressed) size.
    var batchBytes: Int

    /// Bytes the frames take in a segment, padding included.
    var frameBytes: Int {
        later.reduce(WALFormat.frameBytes(payloadBytes: first.stored.count)) { $0 + WALFormat.frameBytes(payloadBytes: $1.stored.count) }
    }

    /// Stored payload bytes (after compression).
    var storedBytes: Int { payloads.count }

    /// Calls `body` with each fragment and its stored payload, in order.
    func forEachFragment(_ body: (Fragment, UnsafeRawBufferPointer) throws -> Void) rethrows {
        try payloads.withUnsafeBytes { payloads in
            try body(first, UnsafeRawBufferPointer(rebasing: payloads[first.stored]))
            for fragment in later { try body(fragment, UnsafeRawBufferPointer(rebasing: payloads[fragment.stored])) }
        }
    }

    /// The largest block compressed on the stack: a one-key commit's batch (about 120
    /// bytes) is compressed there and copied out at its compressed size, where compressing
    /// into the array itself made room for the worst case first and cut it back after
    /// (about 500 instructions, callgrind). 1 KiB is the standard library's limit for a
    /// temporary allocation on the stack here.
    static let stackBlockBytes = 1_024

    init(_ encoding: WALBatch.Encoding, compression: Bool) throws(WALError) {
        let raw = encoding.bytes
        guard raw.count <= WALFormat.maxBatchBytes else {
            throw .batchTooLarge(byteCount: raw.count, limit: WALFormat.maxBatchBytes)
        }
        // Every encoding holds at least its operation count; a frame holds at least a byte.
        precondition(!raw.isEmpty, "an empty encoding")
        batchBytes = raw.count
        if compression && LZ4Block.compressBound(raw.count) <= Self.stackBlockBytes {
            let (payloads, single) = raw.withUnsafeBytes(Self.compressedOnTheStack)
            self.payloads = payloads
            first = single
            later = []
            return
        }
        (payloads, first, later) = raw.withUnsafeBytes { raw in
            Self.fragments(byteCount: raw.count, compression: compression) { UnsafeRawBufferPointer(rebasing: raw[$0]) }
        }
    }

    /// A batch's fragments made as the log encodes it: one larger than a fragment is
    /// encoded a fragment at a time into a buffer of a fragment's size
    /// (`WALBatch.EncodingStream`), never laid out whole; a smaller one as `encoding`.
    init(_ batch: WALBatch, measure: WALBatch.Measure, compression: Bool) throws(WALError) {
        guard measure.encodedByteCount > WALFormat.maxFragmentBytes else {
            self = try EncodedBatch(batch.encoding(measure: measure), compression: compression)
            return
        }
        guard measure.encodedByteCount <= WALFormat.maxBatchBytes else {
            throw .batchTooLarge(byteCount: measure.encodedByteCount, limit: WALFormat.maxBatchBytes)
        }
        batchBytes = measure.encodedByteCount
        let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: WALFormat.maxFragmentBytes, alignment: 16)
        defer { scratch.deallocate() }
        var stream = WALBatch.EncodingStream()
        (payloads, first, later) = batch.operations.withUnsafeBufferPointer { operations in
            Self.fragments(byteCount: measure.encodedByteCount, compression: compression) { range in
                let piece = UnsafeMutableRawBufferPointer(rebasing: scratch[..<range.count])
                precondition(stream.write(into: piece, from: operations) == range.count, "a batch changed while it was encoded")
                return UnsafeRawBufferPointer(piece)
            }
        }
    }

    /// A one-fragment batch compressed on the stack and copied out at its compressed size
    /// (or raw, when compression does not make it smaller).
    @inline(__always)
    private static func compressedOnTheStack(_ raw: UnsafeRawBufferPointer) -> ([UInt8], Fragment) {
        var payloads: [UInt8] = []
        let compressed = withUnsafeTemporaryAllocation(byteCount: Self.stackBlockBytes, alignment: 1) { scratch in
            guard let written = LZ4Block.compress(raw, into: scratch, acceleration: LZ4Block.acceleration) else { return false }
            payloads = Array(UnsafeRawBufferPointer(rebasing: scratch[..<written]))
            return true
        }
        if !compressed { payloads = Array(raw) }
        return (payloads, Fragment(stored: 0..<payloads.count, rawBytes: raw.count, compressed: compressed, kind: .full))
    }

    /// The fragments of an encoding of `byteCount` bytes, whose raw bytes in each range
    /// `piece` hands out (valid until its next call), each stored after the one before.
    private static func fragments(byteCount: Int, compression: Bool,
                                  piece: (Range<Int>) -> UnsafeRawBufferPointer) -> ([UInt8], Fragment, [Fragment]) {
        let count = max(1, (byteCount + WALFormat.maxFragmentBytes - 1) / WALFormat.maxFragmentBytes)
        var fragments: [Fragment] = []
        fragments.reserveCapacity(count)
        // Room for every fragment's worst case, each written in place: no zeros first,
        // and the first write into a batch of 32 MiB or more is asked to use huge pages.
        let capacity = compression ? LZ4Block.compressBound(byteCount) + 16 * count : byteCount
        let payloads = [UInt8](unsafeUninitializedCapacity: capacity) { output, written in
            let output = UnsafeMutableRawBufferPointer(output)
            TransientMemory.adviseHugePages(output)
            written = 0
            for index in 0..<count {
                let range = (index * WALFormat.maxFragmentBytes)..<min(byteCount, (index + 1) * WALFormat.maxFragmentBytes)
                let kind: FragmentKind = count == 1 ? .full : index == 0 ? .first : index == count - 1 ? .last : .middle
                let raw = piece(range)
                let rest = UnsafeMutableRawBufferPointer(rebasing: output[written...])
                // A block only when it is smaller than the piece; else the piece raw.
                let block = compression ? LZ4Block.compress(raw, into: rest, acceleration: LZ4Block.acceleration) : nil
                if block == nil { rest.copyMemory(from: raw) }
                let stored = block ?? raw.count
                fragments.append(Fragment(stored: written..<(written + stored), rawBytes: range.count,
                                          compressed: block != nil, kind: kind))
                written += stored
            }
        }
        return (payloads, fragments[0], Array(fragments.dropFirst()))
    }
}
