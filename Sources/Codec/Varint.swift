// Unsigned LEB128 varints, as every format in FORMAT.md writes them: seven bits a byte,
// low bits first, at most ten bytes, in their shortest form only (a final byte of zero is
// malformed), so every value has exactly one encoding. The one decoder of them: ByteReader,
// the page reader and the record scanner all read through it.

package enum Varint {
    /// Reads the varint at `offset` of `bytes[..<end]` (all of `bytes` by default) and moves
    /// `offset` past what it read. Throws `CodecError.truncated` when the bytes end first
    /// `.malformedVarint` (at the varint's start) for one longer than ten bytes or over 64
    /// bits, and `.nonShortestVarint` for one not in its shortest form.
    @inlinable
    package static func read(_ bytes: UnsafeRawBufferPointer, at offset: inout Int, end: Int? = nil) throws(CodecError) -> UInt64 {
        let end = end ?? bytes.count
        if let value = readShort(bytes, at: &offset, end: end) { return value }
        let start = offset
        var result: UInt64 = 0
        var shift: UInt64 = 0
        while true {
            guard offset < end else { throw .truncated(offset: offset, needed: 1, available: 0) }
            let byte = bytes[offset]
            offset += 1
            // The tenth byte may only contribute the top bit of a 64-bit value.
            if shift == 63 && byte > 1 { throw .malformedVarint(offset: start) }
            result |= UInt64(byte & 0x7F) << shift
            if byte & 0x80 == 0 {
                guard byte != 0 || shift == 0 else { throw .nonShortestVarint(offset: start) }
                return result
            }
            shift += 7
        }
    }

    /// A varint of one to three bytes in its shortest form (lengths, counts, most ids) read
    /// in line, or nil, moving nothing, for anything else: a longer one, one not in its
    /// shortest form, or one the bytes cut short, which `read` reads or rejects.
    @inlinable @inline(__always)
    package static func readShort(_ bytes: UnsafeRawBufferPointer, at offset: inout Int, end: Int) -> UInt64? {
        guard offset < end else { return nil }
        let first = UInt64(bytes[offset])
        if first < 0x80 {
            offset += 1
            return first
        }
        guard offset + 1 < end else { return nil }
        // A last byte of zero is not the shortest form.
        let second = UInt64(bytes[offset + 1])
        if second < 0x80, second != 0 {
            offset += 2
            return first & 0x7F | second << 7
        }
        guard offset + 2 < end else { return nil }
        let third = UInt64(bytes[offset + 2])
        if second >= 0x80, third < 0x80, third != 0 {
            offset += 3
            return first & 0x7F | (second & 0x7F) << 7 | third << 14
        }
        return nil
    }
}
