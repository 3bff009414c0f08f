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

    /// Appends `value` as an unsigned LEB128 varint (1 to 10 bytes).
    package mutating func writeVarint(_ value: UInt64) {
        Self.varintBytes(of: value) { bytes.append($0) }
    }

    /// Hands `body` the bytes of `value` as an unsigned LEB128 varint, in order: the one
    /// encoding of varints, for writers that do not append to a `ByteWriter`.
    @inlinable
    package static func varintBytes(of value: UInt64, _ body: (UInt8) -> Void) {
        var rest = value
        while rest >= 0x80 {
            body(UInt8(truncatingIfNeeded: rest) | 0x80)
            rest >>= 7
        }
        body(UInt8(rest))
    }

    /// Appends raw bytes.
    package mutating func write(contentsOf data: some Collection<UInt8>) { bytes.append(contentsOf: data) }

    /// Appends `count` zero bytes.
    package mutating func writeZeros(_ count: Int) { bytes.append(contentsOf: repeatElement(0, count: count)) }

    /// Overwrites 4 bytes at `offset` with `value`, little-endian (for checksums written last).
    package mutating func overwrite(_ value: UInt32, at offset: Int) {
        precondition(offset >= 0 && offset + 4 <= bytes.count, "overwrite outside the written bytes")
        withUnsafeBytes(of: value.littleEndian) { source in
            for index in 0..<4 { bytes[offset + index] = source[index] }
        }
    }

    private mutating func writeLittleEndian<T: FixedWidthInteger>(_ value: T) {
        withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
    }
}
