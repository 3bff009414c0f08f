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
        let count = max(1, (raw.count + WALFormat.maxFragmentBytes - 1) / WALFormat.maxFragmentBytes)
        var payloads: [UInt8] = []
        var single: Fragment?
        var fragments: [Fragment] = []
        raw.withUnsafeBytes { buffer in
            if count == 1 && compression && LZ4Block.compressBound(buffer.count) <= Self.stackBlockBytes {
                let compressed = withUnsafeTemporaryAllocation(byteCount: Self.stackBlockBytes, alignment: 1) { scratch in
                    guard let written = LZ4Block.compress(buffer, into: scratch, acceleration: LZ4Block.acceleration) else { return false }
                    payloads = Array(UnsafeRawBufferPointer(rebasing: scratch[..<written]))
                    return true
                }
                if !compressed { payloads = Array(buffer) }
                single = Fragment(stored: 0..<payloads.count, rawBytes: buffer.count, compressed: compressed, kind: .full)
                return
            }
            // Room for every fragment's worst case, each written in place: no zeros first,
            // and the first write into a batch of 32 MiB or more is asked to use huge pages.
            let capacity = compression ? LZ4Block.compressBound(buffer.count) + 16 * count : buffer.count
            fragments.reserveCapacity(count)
            payloads = [UInt8](unsafeUninitializedCapacity: capacity) { output, written in
                let output = UnsafeMutableRawBufferPointer(output)
                TransientMemory.adviseHugePages(output)
                written = 0
                for index in 0..<count {
                    let range = (index * WALFormat.maxFragmentBytes)..<min(buffer.count, (index + 1) * WALFormat.maxFragmentBytes)
                    let kind: FragmentKind = count == 1 ? .full : index == 0 ? .first : index == count - 1 ? .last : .middle
                    let piece = UnsafeRawBufferPointer(rebasing: buffer[range])
                    let rest = UnsafeMutableRawBufferPointer(rebasing: output[written...])
                    // A block only when it is smaller than the piece; else the piece raw.
                    let block = compression ? LZ4Block.compress(piece, into: rest, acceleration: LZ4Block.acceleration) : nil
                    if block == nil { rest.copyMemory(from: piece) }
                    let stored = block ?? piece.count
                    fragments.append(Fragment(stored: written..<(written + stored), rawBytes: range.count,
                                              compressed: block != nil, kind: kind))
                    written += stored
                }
            }
        }
        self.payloads = payloads
        if let single {
            first = single
            later = []
        } else {
            first = fragments[0]
            later = Array(fragments.dropFirst())
        }
    }
}
