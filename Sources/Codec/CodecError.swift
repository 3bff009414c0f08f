// The one error type of the Codec module: bytes that do not decode.
//
// Offsets are relative to the buffer handed to the decoder; callers that know the file and
// its offset (the WAL reader, the page reader) wrap these into their own errors.

/// Bytes that could not be decoded. Every case says where and what.
package enum CodecError: Error, Equatable, Sendable, CustomStringConvertible {
    /// The input ended before a field of `needed` bytes at `offset` (only `available` remain).
    case truncated(offset: Int, needed: Int, available: Int)
    /// A variable-length integer at `offset` is longer than 10 bytes or overflows 64 bits.
    case malformedVarint(offset: Int)
    /// A variable-length integer at `offset` is not in its shortest form (its last byte is
    /// zero): every value has exactly one encoding.
    case nonShortestVarint(offset: Int)
    /// A length or count read at `offset` is `value`, above the limit `limit` for that field.
    case lengthOverLimit(offset: Int, value: UInt64, limit: UInt64)
    /// An LZ4 block of `compressedCount` bytes did not decompress to exactly `expectedCount` bytes.
    case malformedLZ4Block(compressedCount: Int, expectedCount: Int)
    /// A field at `offset` holds `value`, which is not one of the values the format defines.
    case invalidValue(offset: Int, value: UInt64, field: String)

    package var description: String {
        switch self {
        case let .truncated(offset, needed, available):
            "The input ends at offset \(offset): a field needs \(needed) bytes but only \(available) remain."
        case let .malformedVarint(offset):
            "The variable-length integer at offset \(offset) is malformed (longer than 10 bytes or over 64 bits)."
        case let .nonShortestVarint(offset):
            "The variable-length integer at offset \(offset) is not in its shortest form (its last byte is zero)."
        case let .lengthOverLimit(offset, value, limit):
            "The length \(value) at offset \(offset) is above the limit of \(limit)."
        case let .malformedLZ4Block(compressedCount, expectedCount):
            "An LZ4 block of \(compressedCount) bytes does not decompress to its declared \(expectedCount) bytes."
        case let .invalidValue(offset, value, field):
            "The \(field) at offset \(offset) is \(value), which the format does not define."
        }
    }
}
