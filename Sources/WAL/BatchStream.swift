// The one decoder of a batch's bytes (FORMAT.md, "Batch encoding"), fed as the bytes
// arrive: fragment by fragment when recovery reads a batch from its frames, all at once
// when a batch is decoded from memory.
//
// Invariants:
//  1. Every count, kind and length is checked against the format's limits (and the batch's
//     declared size) the moment it is read, before anything is built for it: a batch that
//     breaks a limit costs no more than the bytes read up to the field that breaks it.
//  2. Nothing of the batch is kept but the operation (or count) the last bytes fed ended
//     inside: at most `maxCarryBytes`, the largest operation the format allows.
//  3. Decoding is total: any bytes give operations or a `CodecError` whose offset is the
//     batch's, never a trap.
import StrataCodec

struct BatchStream {
    /// Called with each operation's kind, key and value (nil for a delete), where they lie
    /// in the bytes fed (valid only during the call).
    typealias Visit = (_ kind: UInt8, _ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer?) throws -> Void

    /// The largest operation the format allows: a kind, two ten-byte varints, the longest
    /// key and the longest value.
    static let maxCarryBytes = 1 + 10 + WALFormat.maxKeyBytes + 10 + WALFormat.maxValueBytes

    /// The batch's encoded size, as its frames declare it: nothing may run past it.
    let batchBytes: Int
    /// Operations the batch declares, once its first four bytes were read.
    private(set) var declaredCount: Int?
    private(set) var operationsRead = 0
    /// The batch offset of the first byte not yet decoded into a count or an operation.
    private var consumed = 0
    /// The bytes from `consumed` on of the count or operation the last bytes fed ended inside.
    private var carry: [UInt8] = []

    init(batchBytes: Int) { self.batchBytes = batchBytes }

    /// What the bytes at a position hold.
    private enum Step {
        case count(Int, end: Int)
        case operation(kind: UInt8, key: Range<Int>, value: Range<Int>?, end: Int)
        /// The bytes end first; the whole item takes `total` bytes when that is known yet.
        case needs(total: Int?)
    }

    /// Decodes the next `bytes` of the batch, calling `visit` for each operation they
    /// complete. Throws `CodecError` (offsets are the batch's) or what `visit` throws.
    mutating func feed(_ bytes: UnsafeRawBufferPointer, _ visit: Visit) throws {
        var index = 0
        while !carry.isEmpty {
            // Complete the item the last bytes ended inside, taking only the bytes it needs
            // (a varint's end is not known before it is read: ten bytes more at most).
            let step = try carry.withUnsafeBytes { carried throws(CodecError) in try self.step(in: carried, from: 0) }
            switch step {
            case let .needs(total):
                let take = min((total ?? carry.count + 10) - carry.count, bytes.count - index)
                guard take > 0 else { return }
                carry.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[index..<(index + take)]))
                index += take
            case let .count(count, end):
                index -= carry.count - end
                declaredCount = count
                consumed += end
                carry = []
            case let .operation(kind, key, value, end):
                // An operation with a large value may have made the carry large: it goes with it.
                let carried = carry
                carry = []
                index -= carried.count - end
                consumed += end
                try carried.withUnsafeBytes { carried in try deliver(kind, key, value, in: carried, visit) }
            }
        }
        while index < bytes.count {
            switch try step(in: bytes, from: index) {
            case .needs:
                carry = Array(UnsafeRawBufferPointer(rebasing: bytes[index...]))
                return
            case let .count(count, end):
                declaredCount = count
                consumed += end - index
                index = end
            case let .operation(kind, key, value, end):
                try deliver(kind, key, value, in: bytes, visit)
                consumed += end - index
                index = end
            }
        }
    }

    /// Checks that the bytes fed were the whole batch: its count and every operation it
    /// declares, and nothing after them.
    func finish() throws(CodecError) {
        guard let declaredCount else {
            throw .truncated(offset: 0, needed: 4, available: consumed + carry.count)
        }
        guard carry.isEmpty, operationsRead == declaredCount else {
            throw .truncated(offset: consumed, needed: max(1, carry.count + 1), available: carry.count)
        }
    }

    private mutating func deliver(_ kind: UInt8, _ key: Range<Int>, _ value: Range<Int>?, in bytes: UnsafeRawBufferPointer,
                                  _ visit: Visit) throws {
        operationsRead += 1
        try visit(kind, UnsafeRawBufferPointer(rebasing: bytes[key]), value.map { UnsafeRawBufferPointer(rebasing: bytes[$0]) })
    }

    /// Decodes the item at `index` of `bytes`, whose batch offset is `consumed`.
    private func step(in bytes: UnsafeRawBufferPointer, from index: Int) throws(CodecError) -> Step {
        let base = consumed - index
        guard let declaredCount else {
            guard bytes.count - index >= 4 else { return .needs(total: 4) }
            let count = UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: index, as: UInt32.self))
            // Every operation takes at least 3 bytes (a kind, a length, a key of one byte).
            let most = max(0, batchBytes - 4) / 3
            guard Int(count) <= most else { throw .lengthOverLimit(offset: 0, value: UInt64(count), limit: UInt64(most)) }
            return .count(Int(count), end: index + 4)
        }
        guard operationsRead < declaredCount else {
            throw .invalidValue(offset: base + index, value: UInt64(max(0, batchBytes - (base + index))),
                                field: "trailing byte count")
        }
        let kind = bytes[index]
        guard kind == WALFormat.putOperation || kind == WALFormat.insertOperation || kind == WALFormat.deleteOperation else {
            throw .invalidValue(offset: base + index, value: UInt64(kind), field: "operation kind")
        }
        var position = index + 1
        guard let keyCount = try Self.varint(in: bytes, at: &position, base: base) else { return .needs(total: nil) }
        guard keyCount > 0 else { throw .invalidValue(offset: base + index + 1, value: 0, field: "key length") }
        guard keyCount <= UInt64(WALFormat.maxKeyBytes) else {
            throw .lengthOverLimit(offset: base + index + 1, value: keyCount, limit: UInt64(WALFormat.maxKeyBytes))
        }
        let key = position..<(position + Int(keyCount))
        position = key.upperBound
        var value: Range<Int>?
        if kind != WALFormat.deleteOperation {
            let lengthOffset = position
            guard position <= bytes.count, let valueCount = try Self.varint(in: bytes, at: &position, base: base) else {
                return .needs(total: nil)
            }
            guard valueCount <= UInt64(WALFormat.maxValueBytes) else {
                throw .lengthOverLimit(offset: base + lengthOffset, value: valueCount, limit: UInt64(WALFormat.maxValueBytes))
            }
            value = position..<(position + Int(valueCount))
            position += Int(valueCount)
        }
        guard base + position <= batchBytes else {
            throw .truncated(offset: base + index, needed: position - index, available: batchBytes - (base + index))
        }
        guard position <= bytes.count else { return .needs(total: position - index) }
        return .operation(kind: kind, key: key, value: value, end: position)
    }

    /// The varint at `position` (moved past it), or nil when `bytes` end inside it. Throws
    /// for one longer than ten bytes, over 64 bits or not in its shortest form.
    private static func varint(in bytes: UnsafeRawBufferPointer, at position: inout Int, base: Int) throws(CodecError) -> UInt64? {
        let start = position
        var result: UInt64 = 0
        var shift: UInt64 = 0
        var index = position
        while index < bytes.count {
            let byte = bytes[index]
            index += 1
            if shift == 63 && byte > 1 { throw .malformedVarint(offset: base + start) }
            result |= UInt64(byte & 0x7F) << shift
            if byte & 0x80 == 0 {
                guard byte != 0 || shift == 0 else { throw .nonShortestVarint(offset: base + start) }
                position = index
                return result
            }
            shift += 7
        }
        return nil
    }
}
