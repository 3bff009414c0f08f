// Bounded little-endian decoding: the reading half of every format in FORMAT.md.
//
// Invariants:
//  1. No read goes past `bytes.count`: each one checks the remaining length first and
//     throws `CodecError.truncated` otherwise.
//  2. No length read from input is trusted: `readBytes(count:)` checks it against the
//     bytes that remain, so a hostile length cannot cause a large allocation.

/// Reads little-endian fixed-width integers, LEB128 varints and byte runs from `bytes`.
package struct ByteReader: Sendable {
    /// The buffer being read.
    package let bytes: [UInt8]
    /// The offset of the next byte to read.
    package private(set) var offset: Int
    /// The offset just past the last readable byte.
    package let endOffset: Int

    /// A reader of `bytes[start..<end]` (the whole buffer by default).
    package init(_ bytes: [UInt8], start: Int = 0, end: Int? = nil) {
        let end = end ?? bytes.count
        precondition(start >= 0 && start <= end && end <= bytes.count, "reader range outside the buffer")
        self.bytes = bytes
        self.offset = start
        self.endOffset = end
    }

    /// The number of bytes left to read.
    package var remaining: Int { endOffset - offset }

    /// Whether every byte has been read.
    package var isAtEnd: Bool { offset == endOffset }

    package mutating func readUInt8() throws(CodecError) -> UInt8 {
        try need(1)
        defer { offset += 1 }
        return bytes[offset]
    }

    package mutating func readUInt16() throws(CodecError) -> UInt16 { try readLittleEndian() }

    package mutating func readUInt32() throws(CodecError) -> UInt32 { try readLittleEndian() }

    package mutating func readUInt64() throws(CodecError) -> UInt64 { try readLittleEndian() }

    /// Reads an unsigned LEB128 varint (`Varint`): at most 10 bytes, in its shortest form,
    /// so every value has exactly one encoding and a decoded record re-encodes to the same
    /// bytes.
    package mutating func readVarint() throws(CodecError) -> UInt64 {
        // One byte (most lengths) without the pointer.
        if offset < endOffset, bytes[offset] < 0x80 {
            defer { offset += 1 }
            return UInt64(bytes[offset])
        }
        var position = offset
        defer { offset = position }
        do {
            return try bytes.withUnsafeBytes { try Varint.read($0, at: &position, end: endOffset) }
        } catch {
            // `withUnsafeBytes` rethrows untyped; only `Varint.read`'s errors come through.
            throw error as! CodecError
        }
    }

    /// Reads a varint length and checks it against `limit` and the bytes that remain.
    package mutating func readLength(limit: Int) throws(CodecError) -> Int {
        let start = offset
        let value = try readVarint()
        guard value <= UInt64(limit) else {
            throw .lengthOverLimit(offset: start, value: value, limit: UInt64(limit))
        }
        return Int(value)
    }

    /// Reads `count` bytes as a new array.
    package mutating func readBytes(count: Int) throws(CodecError) -> [UInt8] {
        try need(count)
        defer { offset += count }
        return Array(bytes[offset..<(offset + count)])
    }

    /// Skips `count` bytes.
    package mutating func skip(_ count: Int) throws(CodecError) {
        try need(count)
        offset += count
    }

    private func need(_ count: Int) throws(CodecError) {
        guard count >= 0, count <= remaining else {
            throw .truncated(offset: offset, needed: count, available: remaining)
        }
    }

    private mutating func readLittleEndian<T: FixedWidthInteger>() throws(CodecError) -> T {
        let size = MemoryLayout<T>.size
        try need(size)
        defer { offset += size }
        return bytes.withUnsafeBytes { T(littleEndian: $0.loadUnaligned(fromByteOffset: offset, as: T.self)) }
    }
}
