// A batch's encoding (FORMAT.md, "Batch encoding") written a piece at a time, for a batch
// larger than one frame: the log compresses it a fragment at a time, so it is encoded a
// fragment at a time into one buffer of a fragment's size, never laid out whole. Laid out
// whole, a batch of 1,000 values of 64 KiB was a fresh mapping of 64 MiB on every commit,
// and writing it (the copy and the kernel zeroing its pages) took 41 % of the committing
// thread's time in a fill (Benchmarks/JOURNAL.md, "A large batch encoded a fragment at a
// time").
//
// Invariant:
//  EncodingStream.S1. The bytes written, over any sequence of buffers, are exactly those
//      of `WALBatch.encoding()` in order: an operation that fits what is left of a buffer
//      is encoded as `encoding()` encodes it, and one that does not is written a part
//      (its kind byte and key length, its key, its value length, its value) at a time,
//      resuming where the last buffer ended.
import StrataCodec

extension WALBatch {
    /// Writes a batch's encoding into buffers handed over one after another.
    struct EncodingStream {
        /// The operation being written; -1 while the operation count is.
        private var operation = -1
        /// Its part being written: 0 the kind byte and key length, 1 the key, 2 the value
        /// length, 3 the value (a delete has only the first two).
        private var part = 0
        /// Bytes of that part written already.
        private var offset = 0

        /// Fills `output` with the encoding's next bytes (fewer only where the encoding
        /// ends); returns how many. `operations` are the batch's, the same on every call.
        mutating func write(into output: UnsafeMutableRawBufferPointer, from operations: UnsafeBufferPointer<Operation>) -> Int {
            var written = 0
            if operation < 0 {
                let count = UInt32(operations.count).littleEndian
                let done = withUnsafeBytes(of: count) { copy($0, into: output, at: &written) }
                guard done else { return written }
                operation = 0
                offset = 0
            }
            while written < output.count && operation < operations.count {
                let kind = Operation.kindByte(of: operations[operation])
                let next = Operation.withBytes(of: operations[operation]) { key, value in
                    if part == 0 && offset == 0 && Self.byteCount(key, value) <= output.count - written {
                        output[written] = kind
                        written += 1
                        _ = WALBatch.store(key, in: output, at: &written)
                        if let value { _ = WALBatch.store(value, in: output, at: &written) }
                        return true
                    }
                    return writePart(kind: kind, key: key, value: value, into: output, at: &written)
                }
                if next {
                    operation += 1
                    part = 0
                    offset = 0
                }
            }
            return written
        }

        /// Writes what fits of the current part of an operation; returns whether the
        /// operation is written whole (its last part done).
        private mutating func writePart(kind: UInt8, key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer?,
                                        into output: UnsafeMutableRawBufferPointer, at written: inout Int) -> Bool {
            // A kind byte and a varint, or a varint: at most 11 bytes.
            var scratch: (UInt64, UInt64) = (0, 0)
            let done = withUnsafeMutableBytes(of: &scratch) { scratch in
                var length = 0
                switch part {
                case 0:
                    scratch[0] = kind
                    length = 1
                    ByteWriter.storeVarint(UInt64(key.count), in: scratch, at: &length)
                    return copy(UnsafeRawBufferPointer(rebasing: scratch[..<length]), into: output, at: &written)
                case 1:
                    return copy(key, into: output, at: &written)
                case 2:
                    ByteWriter.storeVarint(UInt64(value!.count), in: scratch, at: &length)
                    return copy(UnsafeRawBufferPointer(rebasing: scratch[..<length]), into: output, at: &written)
                default:
                    return copy(value!, into: output, at: &written)
                }
            }
            guard done else { return false }
            part += 1
            offset = 0
            return part == 4 || (part == 2 && value == nil)
        }

        /// Copies what fits of `bytes` after `offset` into `output` at `written`; returns
        /// whether `bytes` are written whole.
        private mutating func copy(_ bytes: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer,
                                   at written: inout Int) -> Bool {
            let count = min(bytes.count - offset, output.count - written)
            if count > 0 {
                (output.baseAddress! + written).copyMemory(from: bytes.baseAddress! + offset, byteCount: count)
            }
            written += count
            offset += count
            return offset == bytes.count
        }

        /// The bytes of an operation's encoding.
        private static func byteCount(_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer?) -> Int {
            var count = 1 + varintByteCount(key.count) + key.count
            if let value { count += varintByteCount(value.count) + value.count }
            return count
        }
    }
}
