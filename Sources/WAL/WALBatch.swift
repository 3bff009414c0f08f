// A batch: the put and delete operations of one commit, the unit the log appends, numbers
// and replays atomically (FORMAT.md, "Batch encoding").
//
// Invariants:
//  1. `decode(encode(b)) == b` for every batch.
//  2. `decode` is total: any bytes give a batch or a `CodecError`, never a trap; counts and
//     lengths are checked against the bytes that remain before anything is allocated.
import StrataCodec

/// The operations of one commit, in the order they were made.
public struct WALBatch: Sendable, Equatable {
    /// One operation.
    public enum Operation: Sendable, Equatable {
        case put(key: [UInt8], value: [UInt8])
        /// A put of a key the store did not hold before this commit: its writer read the
        /// key's absence, and the commit's conflict check vouches that no commit wrote it
        /// since. Stored like a put; it tells change feeds "inserted" from "updated".
        case insert(key: [UInt8], value: [UInt8])
        case delete(key: [UInt8])

        /// The key the operation changes.
        public var key: [UInt8] {
            switch self {
            case let .put(key, _), let .insert(key, _), let .delete(key): key
            }
        }

        /// The key and the value (nil for a delete), read with one switch.
        @inlinable
        public var keyAndValue: (key: [UInt8], value: [UInt8]?) {
            switch self {
            case let .put(key, value), let .insert(key, value): (key, value)
            case let .delete(key): (key, nil)
            }
        }

        /// The value a put or insert stores, or nil for a delete.
        public var value: [UInt8]? {
            switch self {
            case let .put(_, value), let .insert(_, value): value
            case .delete: nil
            }
        }
    }

    /// The operations in commit order.
    public var operations: [Operation]

    public init(_ operations: [Operation] = []) { self.operations = operations }

    /// Adds a put of `value` under `key`.
    public mutating func put(_ key: [UInt8], _ value: [UInt8]) { operations.append(.put(key: key, value: value)) }

    /// Adds a delete of `key`.
    public mutating func delete(_ key: [UInt8]) { operations.append(.delete(key: key)) }

    /// What one walk over the operations finds: the size of their encoding and the
    /// lengths of the shortest and longest key and the longest value (0 for an empty batch).
    /// A committer measures once and hands the measure on, so that checking limits, sizing
    /// the encoding and encoding take two walks, not four.
    public struct Measure: Sendable, Equatable {
        public var encodedByteCount: Int
        public var shortestKeyBytes: Int
        public var longestKeyBytes: Int
        public var longestValueBytes: Int
    }

    /// The batch's `Measure`, in one walk.
    public var measure: Measure {
        // By index, switching on each operation where it lies: a loop over copies of the
        // operations (for-in, reduce) retained and released every key and value.
        var measure = Measure(encodedByteCount: 4, shortestKeyBytes: operations.isEmpty ? 0 : .max, longestKeyBytes: 0,
                              longestValueBytes: 0)
        for index in operations.indices {
            let keyBytes: Int
            switch operations[index] {
            case let .put(key, value), let .insert(key, value):
                keyBytes = key.count
                measure.encodedByteCount += 1 + varintByteCount(keyBytes) + keyBytes + varintByteCount(value.count)
                    + value.count
                measure.longestValueBytes = max(measure.longestValueBytes, value.count)
            case let .delete(key):
                keyBytes = key.count
                measure.encodedByteCount += 1 + varintByteCount(keyBytes) + keyBytes
            }
            measure.shortestKeyBytes = min(measure.shortestKeyBytes, keyBytes)
            measure.longestKeyBytes = max(measure.longestKeyBytes, keyBytes)
        }
        return measure
    }

    /// The size of the encoding, in bytes, without building it.
    public var encodedByteCount: Int { measure.encodedByteCount }

    /// The batch's bytes: a little-endian u32 operation count, then per operation a kind byte
    /// (1 put, 2 delete, 3 insert), a varint key length and the key, and for a put or an
    /// insert a varint value length and the value.
    public func encoded() -> [UInt8] { encoded(byteCount: encodedByteCount) }

    /// `encoded()` when its size, `byteCount`, is known (from `measure`).
    func encoded(byteCount: Int) -> [UInt8] {
        var writer = ByteWriter(capacity: byteCount)
        writer.write(UInt32(operations.count))
        for index in operations.indices {
            switch operations[index] {
            case let .put(key, value), let .insert(key, value):
                if case .insert = operations[index] {
                    writer.write(WALFormat.insertOperation)
                } else {
                    writer.write(WALFormat.putOperation)
                }
                writer.writeVarint(UInt64(key.count))
                writer.write(contentsOf: key)
                writer.writeVarint(UInt64(value.count))
                writer.write(contentsOf: value)
            case let .delete(key):
                writer.write(WALFormat.deleteOperation)
                writer.writeVarint(UInt64(key.count))
                writer.write(contentsOf: key)
            }
        }
        return writer.bytes
    }

    /// Where one operation of an encoded batch lies: its kind byte and the byte ranges of
    /// its key and value (nil for a delete), read in place by `locateOperations`.
    public struct OperationLocation: Sendable, Equatable {
        /// `WALFormat.putOperation`, `.deleteOperation` or `.insertOperation`.
        public let kind: UInt8
        public let key: Range<Int>
        public let value: Range<Int>?
    }

    /// Decodes a batch from exactly `bytes`; trailing bytes are an error.
    public static func decode(_ bytes: [UInt8]) throws(CodecError) -> WALBatch {
        WALBatch(operations(of: bytes, at: try locateOperations(bytes)))
    }

    /// The operations of the batch encoded in `bytes`, checked as `decode` checks them but
    /// not copied out: recovery reads keys and values where they lie (a million replayed
    /// operations were two million arrays made and freed).
    public static func locateOperations(_ bytes: [UInt8]) throws(CodecError) -> [OperationLocation] {
        var reader = ByteReader(bytes)
        let count = Int(try reader.readUInt32())
        // Every operation takes at least 2 bytes, so a larger count cannot be honest.
        guard count <= reader.remaining / 2 else {
            throw .lengthOverLimit(offset: 0, value: UInt64(count), limit: UInt64(reader.remaining / 2))
        }
        var locations: [OperationLocation] = []
        locations.reserveCapacity(count)
        for _ in 0..<count {
            let kindOffset = reader.offset
            let kind = try reader.readUInt8()
            let keyCount = try reader.readLength(limit: reader.remaining)
            let key = reader.offset..<(reader.offset + keyCount)
            try reader.skip(keyCount)
            switch kind {
            case WALFormat.putOperation, WALFormat.insertOperation:
                let valueCount = try reader.readLength(limit: reader.remaining)
                let value = reader.offset..<(reader.offset + valueCount)
                try reader.skip(valueCount)
                locations.append(OperationLocation(kind: kind, key: key, value: value))
            case WALFormat.deleteOperation:
                locations.append(OperationLocation(kind: kind, key: key, value: nil))
            default:
                throw .invalidValue(offset: kindOffset, value: UInt64(kind), field: "operation kind")
            }
        }
        guard reader.isAtEnd else {
            throw .invalidValue(offset: reader.offset, value: UInt64(reader.remaining), field: "trailing byte count")
        }
        return locations
    }

    /// The operations `locations` name, copied out; `locations` come from
    /// `locateOperations(bytes)` on these very bytes (internal: other ranges could trap).
    static func operations(of bytes: [UInt8], at locations: [OperationLocation]) -> [Operation] {
        locations.map { location in
            let key = Array(bytes[location.key])
            switch (location.kind, location.value) {
            case let (WALFormat.insertOperation, value?): return .insert(key: key, value: Array(bytes[value]))
            case let (_, value?): return .put(key: key, value: Array(bytes[value]))
            case (_, nil): return .delete(key: key)
            }
        }
    }
}

private func varintByteCount(_ value: Int) -> Int {
    var count = 1
    var rest = UInt64(value) >> 7
    while rest > 0 { count += 1; rest >>= 7 }
    return count
}

/// A batch queued by `WriteAheadLog.enqueue(_:)`: its LSN and sizes.
public struct Submission: Sendable {
    /// The batch's LSN (its commit version).
    public let lsn: LSN
    /// Bytes of the encoded batch.
    public let rawByteCount: Int
    /// Bytes of its frame payloads as stored (after LZ4 where it helped).
    public let storedByteCount: Int
}
