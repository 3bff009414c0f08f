// A batch made ready for the log before any lock is taken: encoded, cut into fragments of
// at most `WALFormat.maxFragmentBytes` raw bytes, and each fragment LZ4-compressed, or
// stored raw when compression does not make it smaller (FORMAT.md, "Payload").
// Only the header fields that depend on the log's state (LSN, durable LSN, salt) are left
// for the group-commit leader to fill in.
import StrataCodec

struct EncodedBatch {
    struct Fragment {
        /// The stored payload: an LZ4 block, or the raw bytes.
        var payload: [UInt8]
        var rawBytes: Int
        var compressed: Bool
        var kind: FragmentKind
    }

    var fragments: [Fragment]
    /// The batch's encoded (uncompressed) size.
    var batchBytes: Int

    /// Bytes the frames take in a segment, padding included.
    var frameBytes: Int {
        fragments.reduce(0) { $0 + WALFormat.frameBytes(payloadBytes: $1.payload.count) }
    }

    /// Stored payload bytes (after compression).
    var storedBytes: Int { fragments.reduce(0) { $0 + $1.payload.count } }

    init(_ encoding: WALBatch.Encoding, compression: Bool) throws(WALError) {
        let raw = encoding.bytes
        guard raw.count <= WALFormat.maxBatchBytes else {
            throw .batchTooLarge(byteCount: raw.count, limit: WALFormat.maxBatchBytes)
        }
        batchBytes = raw.count
        let pieces = stride(from: 0, to: raw.count, by: WALFormat.maxFragmentBytes).map {
            $0..<min(raw.count, $0 + WALFormat.maxFragmentBytes)
        }
        fragments = []
        fragments.reserveCapacity(pieces.count)
        raw.withUnsafeBytes { buffer in
            for (index, range) in pieces.enumerated() {
                let kind: FragmentKind = pieces.count == 1 ? .full
                    : index == 0 ? .first : index == pieces.count - 1 ? .last : .middle
                let piece = UnsafeRawBufferPointer(rebasing: buffer[range])
                var payload: [UInt8] = []
                let compressed = compression && LZ4Block.compress(piece, appendingTo: &payload) != nil
                if !compressed { payload = Array(piece) }
                fragments.append(Fragment(payload: payload, rawBytes: range.count, compressed: compressed, kind: kind))
            }
        }
    }
}
