// Little-endian encoding into a growable byte buffer: the writing half of every format in
// FORMAT.md. Fixed-width integers are little-endian; varints are unsigned LEB128.

/// Appends little-endian fixed-width integers, LEB128 varints and raw bytes to `bytes`.
package struct ByteWriter: Sendable {
    /// The encoded bytes so far.
    package var bytes: [UInt8]

    /// A writer with `capacity` bytes reserved.
    package init(capacity: Int = 0) {
        bytes = []
        bytes.reserveCapacity(capacity)
    }

    /// The number of bytes written so far.
    package var count: Int { bytes.count }

    package mutating func write(_ value: UInt8) { bytes.append(value) }

    package mutating func write(_ value: UInt16) { writeLittleEndian(value) }

    package mutating func write(_ value: UInt32) { writeLittleEndian(value) }

    package mutating func write(_ value: UInt64) { writeLittleEndian(value) }

    /// Appends `value` as an unsigned LEB128 varint (1 to 10 bytes; `storeVarint`).
    package mutating func writeVarint(_ value: UInt64) {
        var scratch: (UInt64, UInt64) = (0, 0)
        withUnsafeMutableBytes(of: &scratch) { scratch in
            var end = 0
            Self.storeVarint(value, in: scratch, at: &end)
            for index in 0..<end { bytes.append(scratch[index]) }
        }
    }

    /// Stores `value` as an unsigned LEB128 varint into `buffer` at `offset` and advances
    /// `offset` past it (1 to 10 bytes, which the caller made room for):
    /// seven bits a byte, lowest first, the high bit set on every byte but the last. The
    /// one encoder of varints; `Varint.read` is the one decoder. (Handed out byte by byte
    /// through a closure, a one-byte varint took about 37 instructions, the closure not
    /// inlined.)
    @inlinable
    package static func storeVarint(_ value: UInt64, in buffer: UnsafeMutableRawBufferPointer, at offset: inout Int) {
        var rest = value
        while rest >= 0x80 {
            buffer[offset] = UInt8(truncatingIfNeeded: rest) | 0x80
            offset += 1
            rest >>= 7
        }
        buffer[offset] = UInt8(rest)
        offset += 1
    }

    /// Appends raw bytes.
    package mutating func write(contentsOf data: some Collection<UInt8>) { bytes.append(contentsOf: data) }

    // The collections other modules append, each specialized here: the generic append
    // above, called from another module, runs unspecialized (it is not inlined there
    // even when marked inlinable), and appending a record's 5-byte field name took about
    // 1,100 instructions that way, most of them runtime lookups of generic metadata
    // (callgrind, records-insert).

    /// Appends raw bytes.
    package mutating func write(contentsOf data: [UInt8]) { bytes.append(contentsOf: data) }

    /// Appends a string's UTF-8.
    package mutating func write(contentsOf utf8: String.UTF8View) { bytes.append(contentsOf: utf8) }

    /// Appends `count` zero bytes.
    package mutating func writeZeros(_ count: Int) {
        // A frame's padding is a few bytes: appended one by one, they skip the generic
        // append of a collection (about 110 instructions for 4 bytes, callgrind).
        if count <= 16 {
            for _ in 0..<count { bytes.append(0) }
        } else {
            bytes.append(contentsOf: repeatElement(0, count: count))
        }
    }

    /// Overwrites 4 bytes at `offset` with `value`, little-endian (for checksums written last).
    package mutating func overwrite(_ value: UInt32, at offset: Int) {
        precondition(offset >= 0 && offset + 4 <= bytes.count, "overwrite outside the written bytes")
        withUnsafeBytes(of: value.littleEndian) { source in
            for index in 0..<4 { bytes[offset + index] = source[index] }
        }
    }

    /// Byte by byte, least significant first, whatever the host's order: as fast as one
    /// store for the array's fast path, where appending the value's raw bytes as a
    /// collection took about 100 instructions for 4 bytes (callgrind).
    @inline(__always)
    private mutating func writeLittleEndian<T: FixedWidthInteger>(_ value: T) {
        for shift in stride(from: 0, to: T.bitWidth, by: 8) { bytes.append(UInt8(truncatingIfNeeded: value >> shift)) }
    }
}
