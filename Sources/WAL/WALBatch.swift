// A batch: the put and delete operations of one commit, the unit the log appends, numbers
// and replays atomically (FORMAT.md, "Batch encoding").
//
// Invariants:
//  1. `decode(encode(b)) == b` for every batch.
//  2. `decode` is total: any bytes give a batch or a `CodecError`, never a trap; counts and
//     lengths are checked against the format's limits and the bytes that remain before
//     anything is allocated (BatchStream.swift).
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

        /// Calls `body` with `operation`'s key bytes and value bytes (nil for a delete)
        /// where they lie. `key`, `value` and a loop over copies of the operations (for-in,
        /// `reduce`) retain and release both arrays per operation; switched on borrowed and
        /// inlined into a loop over the operations' buffer, this counts no reference at all.
        @inlinable @inline(__always)
        public static func withBytes<Result>(
            of operation: borrowing Self,
            _ body: (_ key: UnsafeRawBufferPointer, _ value: UnsafeRawBufferPointer?) throws -> Result
        ) rethrows -> Result {
            switch operation {
            case .put(let key, let value), .insert(let key, let value):
                try key.withUnsafeBytes { key in try value.withUnsafeBytes { value in try body(key, value) } }
            case .delete(let key):
                try key.withUnsafeBytes { key in try body(key, nil) }
            }
        }

        /// The operation a decoded kind byte, key and value (nil for a delete) stand for.
        init(kind: UInt8, key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer?) {
            switch (kind, value) {
            case let (WALFormat.insertOperation, value?): self = .insert(key: Array(key), value: Array(value))
            case let (_, value?): self = .put(key: Array(key), value: Array(value))
            case (_, nil): self = .delete(key: Array(key))
            }
        }

        /// The kind byte of the operation's encoding (FORMAT.md, "Batch encoding").
        @inline(__always)
        static func kindByte(of operation: borrowing Self) -> UInt8 {
            switch operation {
            case .put: WALFormat.putOperation
            case .insert: WALFormat.insertOperation
            case .delete: WALFormat.deleteOperation
            }
        }
    }

    /// The operations in commit order.
    public var operations: [Operation]

    /// The indexes of the operations whose key ends in a version stamp, in key order: its
    /// last 16 bytes are replaced by the commit (`stampingVersion(_:)`) with the commit's
    /// version and the operation's place among these (0, 1, …), both 8 bytes big-endian,
    /// so such keys sort in commit order and come out the same in every run. Until then
    /// those bytes only keep the staged keys apart. The records layer's outbox keys its
    /// events this way. Only a batch still to commit has stamps: the log stores the
    /// stamped keys, and a decoded batch has none.
    package var versionStampedOperations: [Int] = []

    public init(_ operations: [Operation] = []) { self.operations = operations }

    /// The bytes a version stamp takes at the end of its key.
    package static let versionStampBytes = 16

    /// This batch with every version-stamped key stamped with `version`, and no stamps
    /// left. A stamped key shorter than the stamp traps: the layer that staged it made it.
    package func stampingVersion(_ version: UInt64) -> WALBatch {
        guard !versionStampedOperations.isEmpty else { return self }
        var stamped = WALBatch(operations)
        for (ordinal, index) in versionStampedOperations.enumerated() {
            var key = stamped.operations[index].key
            precondition(key.count >= Self.versionStampBytes, "a version-stamped key is shorter than its stamp")
            let stamp = withUnsafeBytes(of: (version.bigEndian, UInt64(ordinal).bigEndian)) { Array($0) }
            key.replaceSubrange((key.count - Self.versionStampBytes)..., with: stamp)
            switch stamped.operations[index] {
            case let .put(_, value): stamped.operations[index] = .put(key: key, value: value)
            case let .insert(_, value): stamped.operations[index] = .insert(key: key, value: value)
            case .delete: stamped.operations[index] = .delete(key: key)
            }
        }
        return stamped
    }

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

        /// Whether the batch takes more than one frame of the log, which then encodes it a
        /// fragment at a time (`EncodingStream`), never whole.
        package var spansFrames: Bool { encodedByteCount > WALFormat.maxFragmentBytes }
    }

    /// The batch's `Measure`, in one walk.
    public var measure: Measure {
        var measure = Measure(encodedByteCount: 4, shortestKeyBytes: operations.isEmpty ? 0 : .max, longestKeyBytes: 0,
                              longestValueBytes: 0)
        operations.withUnsafeBufferPointer { operations in
            for index in operations.indices {
                Operation.withBytes(of: operations[index]) { key, value in
                    measure.encodedByteCount += 1 + varintByteCount(key.count) + key.count
                    if let value {
                        measure.encodedByteCount += varintByteCount(value.count) + value.count
                        measure.longestValueBytes = max(measure.longestValueBytes, value.count)
                    }
                    measure.shortestKeyBytes = min(measure.shortestKeyBytes, key.count)
                    measure.longestKeyBytes = max(measure.longestKeyBytes, key.count)
                }
            }
        }
        return measure
    }

    /// The size of the encoding, in bytes, without building it.
    public var encodedByteCount: Int { measure.encodedByteCount }

    /// The batch's bytes: a little-endian u32 operation count, then per operation a kind byte
    /// (1 put, 2 delete, 3 insert), a varint key length and the key, and for a put or an
    /// insert a varint value length and the value.
    public func encoded() -> [UInt8] { encoding().bytes }

    /// A batch's bytes (`encoded()`) with where each operation lies in them: what the log
    /// stores, and what the memtable links from, as recovery does from the log, without
    /// a copy of the operations' arrays or a count of their references. A commit larger
    /// than one frame is never encoded whole (`EncodingStream`).
    public struct Encoding: Sendable {
        public let bytes: [UInt8]
        public let operationLocations: [OperationLocation]
    }

    /// The batch's `Encoding`.
    public func encoding() -> Encoding { encoding(measure: measure) }

    /// The batch's `Encoding`, made in one pass, for a caller that has its `measure`
    /// already (the bytes are sized by it, so it must be this batch's). Each operation is
    /// read where it lies and written straight into the bytes, with nothing opaque called
    /// meanwhile (a call the compiler cannot see into makes it copy the operation first:
    /// a retain and a release per array).
    package func encoding(measure: Measure) -> Encoding {
        let byteCount = measure.encodedByteCount
        let count = operations.count
        if byteCount <= Self.smallEncodingBytes && count <= Self.smallEncodingOperations {
            // A small batch (a one-key commit's) is encoded on the stack and copied into
            // its arrays: an array made with `unsafeUninitializedCapacity` looks its
            // storage class up in the runtime's generic metadata cache (about 660
            // instructions each, two a commit, callgrind), one copied from a buffer does not.
            return withUnsafeTemporaryAllocation(byteCount: byteCount, alignment: 8) { output in
                withUnsafeTemporaryAllocation(of: OperationLocation.self, capacity: count) { locations in
                    encode(into: output, locations: locations.baseAddress)
                    defer { locations.baseAddress?.deinitialize(count: count) }
                    return Encoding(bytes: Array(UnsafeRawBufferPointer(output)),
                                    operationLocations: Array(UnsafeBufferPointer(locations)))
                }
            }
        }
        var bytes: [UInt8] = []
        let locations = [OperationLocation](unsafeUninitializedCapacity: count) { locations, located in
            bytes = [UInt8](unsafeUninitializedCapacity: byteCount) { buffer, written in
                encode(into: UnsafeMutableRawBufferPointer(buffer), locations: locations.baseAddress)
                written = byteCount
            }
            located = count
        }
        return Encoding(bytes: bytes, operationLocations: locations)
    }

    /// Batches up to these sizes are encoded on the stack (`encoding(measure:)`): the
    /// standard library's temporary allocations are on the stack up to 1 KiB.
    static let smallEncodingBytes = 1_024
    static let smallEncodingOperations = smallEncodingBytes / MemoryLayout<OperationLocation>.stride

    /// Writes the encoding into `output`, which has exactly the measured byte count, and
    /// initializes one location per operation at `locations`.
    private func encode(into output: UnsafeMutableRawBufferPointer, locations: UnsafeMutablePointer<OperationLocation>?) {
        output.storeBytes(of: UInt32(operations.count).littleEndian, as: UInt32.self)
        var offset = 4
        operations.withUnsafeBufferPointer { operations in
            for index in operations.indices {
                let kind = Operation.kindByte(of: operations[index])
                Operation.withBytes(of: operations[index]) { key, value in
                    output[offset] = kind
                    offset += 1
                    let keyRange = Self.store(key, in: output, at: &offset)
                    let valueRange = value.map { Self.store($0, in: output, at: &offset) }
                    (locations! + index).initialize(to: OperationLocation(kind: kind, key: keyRange, value: valueRange))
                }
            }
        }
        precondition(offset == output.count, "a batch changed while it was encoded")
    }

    /// Writes `bytes`' varint length and then `bytes` into `output` at `offset`, advancing
    /// it; returns where `bytes` went. The caller sized `output` (`measure`).
    @inline(__always)
    static func store(_ bytes: UnsafeRawBufferPointer, in output: UnsafeMutableRawBufferPointer,
                              at offset: inout Int) -> Range<Int> {
        ByteWriter.storeVarint(UInt64(bytes.count), in: output, at: &offset)
        let start = offset
        if let source = bytes.baseAddress, bytes.count > 0 {
            (output.baseAddress! + start).copyMemory(from: source, byteCount: bytes.count)
        }
        offset += bytes.count
        return start..<offset
    }

    /// Where one operation of an encoded batch lies: its kind byte and the byte ranges of
    /// its key and value (nil for a delete), for the memtable to read in place.
    public struct OperationLocation: Sendable, Equatable {
        /// `WALFormat.putOperation`, `.deleteOperation` or `.insertOperation`.
        public let kind: UInt8
        public let key: Range<Int>
        public let value: Range<Int>?
    }

    /// Decodes a batch from exactly `bytes` (`BatchStream`, the one decoder of batches):
    /// trailing bytes, a key of 0 or more than `WALFormat.maxKeyBytes` bytes and a value
    /// over `WALFormat.maxValueBytes` are errors.
    package static func decode(_ bytes: [UInt8]) throws(CodecError) -> WALBatch {
        var operations: [Operation] = []
        var stream = BatchStream(batchBytes: bytes.count)
        do {
            try bytes.withUnsafeBytes { bytes in
                try stream.feed(bytes) { kind, key, value in operations.append(Operation(kind: kind, key: key, value: value)) }
            }
            try stream.finish()
        } catch {
            // The visit throws nothing: only the stream's errors come through.
            throw error as! CodecError
        }
        return WALBatch(operations)
    }
}

func varintByteCount(_ value: Int) -> Int {
    var count = 1
    var rest = UInt64(value) >> 7
    while rest > 0 { count += 1; rest >>= 7 }
    return count
}

/// A batch queued by `WriteAheadLog.enqueue(_:)`: its LSN and sizes.
package struct Submission: Sendable {
    /// The batch's LSN (its commit version).
    package let lsn: LSN
    /// Bytes of the encoded batch.
    package let rawByteCount: Int
    /// Bytes of its frame payloads as stored (after LZ4 where it helped).
    package let storedByteCount: Int
}
