// LZ4 block compression (liblz4's block format, not its frame format) for WAL payloads
// (FORMAT.md, "Frame", its payload) and compressed leaf pages ("Compressed leaves").
//
// Invariants:
//  1. `decompress` never writes or allocates past `decompressedCount`, which callers bound
//     by a limit before calling; malformed input is a `CodecError`, never a trap.
//  2. `compress` reports `nil` when the block would not be smaller than its input, so the
//     caller stores those bytes raw (incompressible data never grows by more than 0 bytes).
//  3. Every block is independent: it refers to no bytes before its own input, so any
//     block decodes alone with `LZ4_decompress_safe`. Which bytes a block holds may
//     depend on the blocks its thread compressed before (a fresh table or a reused one);
//     what it decodes to never does.
// Thread-safe: each thread compresses with a table of its own (`threadStream`).
import CStrataLZ4
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// LZ4 block compression.
package enum LZ4Block {
    /// The largest input liblz4 accepts (LZ4_MAX_INPUT_SIZE).
    package static let maxInputCount = 0x7E00_0000

    /// The worst-case compressed size of `count` input bytes.
    package static func compressBound(_ count: Int) -> Int {
        precondition(count >= 0 && count <= maxInputCount, "LZ4 input of \(count) bytes is over the limit")
        return Int(LZ4_compressBound(Int32(count)))
    }

    /// LZ4's acceleration (1 is its default): each step up skips more of the input when
    /// looking for matches, trading some compression for speed. Decoding is unaffected.
    /// At 4, a fillrandom commit (batches of 1,000 keys with 100-byte values) costs 10 %
    /// fewer instructions and its log frames 5 % more bytes (61.0 MiB instead of 58.2 MiB
    /// for 1M keys; callgrind and strata-bench, 2026-11-24).
    package static let acceleration: Int32 = 4

    /// Compresses a byte array; `nil` when compression does not make it smaller.
    package static func compress(_ input: [UInt8]) -> [UInt8]? {
        guard !input.isEmpty else { return nil }
        // Written in place into a new array (no zero fill first: a debug build fills one
        // element at a time).
        let output = [UInt8](unsafeUninitializedCapacity: compressBound(input.count)) { buffer, count in
            let written = input.withUnsafeBytes { input in
                compressBlock(input, into: UnsafeMutableRawBufferPointer(buffer), acceleration: Self.acceleration)
            }
            count = written > 0 && written < input.count ? written : 0
        }
        return output.isEmpty ? nil : output
    }

    /// Compresses `input` into `output` with LZ4's `acceleration` (1 packs tightest);
    /// returns the block's size, or `nil` when it does not fit `output` or, unless
    /// `allowingGrowth` (a block that must be one whatever its size), would not be smaller
    /// than the input. O(n); allocates nothing.
    package static func compress(_ input: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer,
                                 acceleration: Int32, allowingGrowth: Bool = false) -> Int? {
        guard input.count > 0, input.count <= maxInputCount, output.count > 0 else { return nil }
        let written = compressBlock(input, into: UnsafeMutableRawBufferPointer(rebasing: output[..<min(output.count, maxInputCount)]),
                                    acceleration: acceleration)
        return written > 0 && (allowingGrowth || written < input.count) ? written : nil
    }

    /// Decompresses one block into `output`, which it must fill exactly. Throws
    /// `CodecError.malformedLZ4Block` for any other outcome; never writes past `output`.
    package static func decompress(_ input: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer) throws(CodecError) {
        guard output.count > 0, output.count <= maxInputCount, input.count > 0, input.count <= maxInputCount else {
            throw .malformedLZ4Block(compressedCount: input.count, expectedCount: output.count)
        }
        let produced = LZ4_decompress_safe(input.baseAddress!.assumingMemoryBound(to: CChar.self),
                                           output.baseAddress!.assumingMemoryBound(to: CChar.self),
                                           Int32(input.count), Int32(output.count))
        guard produced == Int32(output.count) else {
            throw .malformedLZ4Block(compressedCount: input.count, expectedCount: output.count)
        }
    }

    /// Decompresses one block that must expand to exactly `decompressedCount` bytes.
    /// Throws `CodecError.malformedLZ4Block` for any other outcome. O(decompressedCount).
    package static func decompress(_ input: UnsafeRawBufferPointer, decompressedCount: Int) throws(CodecError) -> [UInt8] {
        guard decompressedCount > 0, decompressedCount <= maxInputCount,
              input.count > 0, input.count <= maxInputCount else {
            throw .malformedLZ4Block(compressedCount: input.count, expectedCount: decompressedCount)
        }
        // Decoded in place into a new array, with no zero fill first: a block that does not
        // produce exactly `decompressedCount` bytes leaves an empty array and throws.
        var produced: Int32 = 0
        let output = [UInt8](unsafeUninitializedCapacity: decompressedCount) { buffer, count in
            produced = LZ4_decompress_safe(
                input.baseAddress!.assumingMemoryBound(to: CChar.self),
                UnsafeMutableRawPointer(buffer.baseAddress!).assumingMemoryBound(to: CChar.self),
                Int32(input.count), Int32(decompressedCount))
            count = produced == Int32(decompressedCount) ? decompressedCount : 0
        }
        guard produced == Int32(decompressedCount), output.count == decompressedCount else {
            throw .malformedLZ4Block(compressedCount: input.count, expectedCount: decompressedCount)
        }
        return output
    }

    /// Decompresses a byte array; see `decompress(_:decompressedCount:)`.
    package static func decompress(_ input: [UInt8], decompressedCount: Int) throws(CodecError) -> [UInt8] {
        let result = input.withUnsafeBytes { buffer in
            Result { () throws(CodecError) in try decompress(buffer, decompressedCount: decompressedCount) }
        }
        return try result.get()
    }

    /// Inputs shorter than this are compressed with the calling thread's table
    /// (`compressBlock`); longer ones with a table zeroed for them, as liblz4's own
    /// `LZ4_prepareTable` zeroes one from 4 KiB up.
    static let reusedTableLimit = 4 << 10

    /// One independent block of `input` into `output` (at most its size); the block's size,
    /// or 0 when it does not fit. `LZ4_compress_fast` zeroes a 16 KiB hash table on the
    /// stack for every call, which for a one-key commit of about a hundred bytes was half
    /// the instructions of its commit (16,400 of 32,400 under callgrind). Below
    /// `reusedTableLimit` the calling thread's table is used instead, made ready for a new
    /// independent block by `LZ4_resetStream_fast`: its old entries are placed more than
    /// 64 KiB back, out of any match's reach, and the block refers to nothing before
    /// `input` (invariant 3). From 4 KiB up the zeroed table is kept, as liblz4's own
    /// `LZ4_prepareTable` does: there the zeroing is a small part of the work, and from
    /// 32 KiB up a reused table's match loop, which checks each candidate against the
    /// block's start, costs more than it saves. Timed in a C loop over liblz4 1.9.4
    /// (acceleration 4, the log's keys and values), a reused table took 0.21–0.29 × the
    /// time at 116 bytes, 0.55–0.63 × at 1,000, 0.88–0.99 × at 4 and 8 KiB, and
    /// 1.07–1.10 × at 32 KiB and 1 MiB.
    private static func compressBlock(_ input: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer,
                                      acceleration: Int32) -> Int {
        let source = input.baseAddress!.assumingMemoryBound(to: CChar.self)
        let destination = output.baseAddress!.assumingMemoryBound(to: CChar.self)
        guard input.count < reusedTableLimit, let stream = threadStream() else {
            return Int(LZ4_compress_fast(source, destination, Int32(input.count), Int32(output.count), acceleration))
        }
        LZ4_resetStream_fast(stream)
        return Int(LZ4_compress_fast_continue(stream, source, destination, Int32(input.count), Int32(output.count),
                                              acceleration))
    }

    /// The calling thread's compression table (16 KiB), made on its first compression and
    /// freed when the thread ends; nil when it cannot be made (no memory, or no
    /// thread-specific key), and a table on the stack serves.
    private static func threadStream() -> UnsafeMutablePointer<LZ4_stream_t>? {
        guard let key = streamKey.value else { return nil }
        if let stream = pthread_getspecific(key) { return stream.assumingMemoryBound(to: LZ4_stream_t.self) }
        guard let stream = LZ4_createStream() else { return nil }
        guard pthread_setspecific(key, stream) == 0 else {
            LZ4_freeStream(stream)
            return nil
        }
        return stream
    }

    /// The thread-specific key of `threadStream`, made once per process.
    private static let streamKey = ThreadStreamKey()
}

/// A `pthread_key_t` whose destructor frees a thread's LZ4 table (nil when none could be
/// made).
private final class ThreadStreamKey: Sendable {
    let value: pthread_key_t?

    init() {
        var key = pthread_key_t()
        #if canImport(Darwin)
        let made = pthread_key_create(&key) { stream in
            LZ4_freeStream(stream.assumingMemoryBound(to: LZ4_stream_t.self))
        }
        #else
        let made = pthread_key_create(&key) { stream in
            guard let stream else { return }
            LZ4_freeStream(stream.assumingMemoryBound(to: LZ4_stream_t.self))
        }
        #endif
        value = made == 0 ? key : nil
    }
}
