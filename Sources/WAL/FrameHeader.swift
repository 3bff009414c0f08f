// The 40-byte header in front of every frame's payload (FORMAT.md, "Frame").
//
// The checksum covers header bytes 4..<40 and the stored payload, so a frame verifies only
// when every byte of it is what the writer wrote. Padding after the payload (to the next
// multiple of 8) is not covered.
import StrataCodec

struct FrameHeader: Equatable {
    var checksum: UInt32
    var salt: UInt32
    var lsn: LSN
    /// Every frame with an LSN at or below this was on stable storage before this frame was
    /// written (WriteAheadLog.W5): it is what lets a reader tell a torn tail from corruption.
    var durableLSN: LSN
    var storedBytes: UInt32
    var rawBytes: UInt32
    var batchBytes: UInt32
    var flags: UInt8
    var kind: UInt8

    var isCompressed: Bool { flags & WALFormat.compressedFlag != 0 }
    /// Whether the frame starts a batch (a whole batch or its first fragment).
    var startsBatch: Bool { kind == FragmentKind.full.rawValue || kind == FragmentKind.first.rawValue }

    /// The header's bytes, with the checksum computed over them and `payload`, appended to
    /// `writer` (`encode(..., into:at:)` lays them out).
    static func encode(salt: UInt32, lsn: LSN, durableLSN: LSN, rawBytes: Int, batchBytes: Int,
                       compressed: Bool, kind: FragmentKind, payload: UnsafeRawBufferPointer,
                       into writer: inout ByteWriter) {
        let start = writer.count
        writer.writeZeros(WALFormat.frameHeaderBytes)
        writer.bytes.withUnsafeMutableBytes { bytes in
            encode(salt: salt, lsn: lsn, durableLSN: durableLSN, rawBytes: rawBytes, batchBytes: batchBytes,
                   compressed: compressed, kind: kind, payload: payload, into: bytes, at: start)
        }
    }

    /// Stores the header's 40 bytes at `offset` of `buffer`, the checksum computed over
    /// them and `payload` (which may already lie right after them in `buffer`). The group
    /// commit's leader lays its frames out this way, with stores instead of appends.
    static func encode(salt: UInt32, lsn: LSN, durableLSN: LSN, rawBytes: Int, batchBytes: Int,
                       compressed: Bool, kind: FragmentKind, payload: UnsafeRawBufferPointer,
                       into buffer: UnsafeMutableRawBufferPointer, at offset: Int) {
        precondition(offset >= 0 && offset + WALFormat.frameHeaderBytes <= buffer.count, "a frame header outside its buffer")
        func store<T: FixedWidthInteger>(_ value: T, _ at: Int) {
            buffer.storeBytes(of: value.littleEndian, toByteOffset: offset + at, as: T.self)
        }
        store(salt, 4)
        store(lsn.rawValue, 8)
        store(durableLSN.rawValue, 16)
        store(UInt32(payload.count), 24)
        store(UInt32(rawBytes), 28)
        store(UInt32(batchBytes), 32)
        store(compressed ? WALFormat.compressedFlag : 0, 36)
        store(kind.rawValue, 37)
        store(UInt16(0), 38)
        let header = UnsafeRawBufferPointer(rebasing: buffer[(offset + 4)..<(offset + WALFormat.frameHeaderBytes)])
        store(CRC32C.extend(CRC32C.extend(0, header), payload), 0)
    }

    /// Reads the header fields at `offset` of `bytes` (the caller checked 40 bytes remain).
    static func parse(_ bytes: UnsafeRawBufferPointer, at offset: Int) -> FrameHeader {
        func load<T: FixedWidthInteger>(_ at: Int, _: T.Type) -> T {
            T(littleEndian: bytes.loadUnaligned(fromByteOffset: offset + at, as: T.self))
        }
        return FrameHeader(checksum: load(0, UInt32.self), salt: load(4, UInt32.self),
                           lsn: LSN(load(8, UInt64.self)), durableLSN: LSN(load(16, UInt64.self)),
                           storedBytes: load(24, UInt32.self), rawBytes: load(28, UInt32.self),
                           batchBytes: load(32, UInt32.self), flags: load(36, UInt8.self),
                           kind: load(37, UInt8.self))
    }

    /// Why the frame at `offset` does not verify, or nil when it does: fields in range, the
    /// salt of its segment, and the checksum over header and payload. `fileBytes` is the
    /// valid length of `bytes`.
    static func defect(in bytes: UnsafeRawBufferPointer, at offset: Int, salt: UInt32) -> (FrameHeader?, String?) {
        guard offset + WALFormat.frameHeaderBytes <= bytes.count else {
            return (nil, "the segment ends inside a frame header")
        }
        let header = parse(bytes, at: offset)
        guard header.salt == salt else { return (header, "its salt is not the segment's") }
        guard header.lsn > .none, header.lsn.rawValue < WALFormat.lsnLimit, header.durableLSN.rawValue < WALFormat.lsnLimit,
              header.rawBytes > 0, header.rawBytes <= UInt32(WALFormat.maxFragmentBytes),
              header.storedBytes > 0, header.storedBytes <= header.rawBytes,
              header.batchBytes >= header.rawBytes, header.batchBytes <= UInt32(WALFormat.maxBatchBytes),
              header.flags & ~WALFormat.compressedFlag == 0,
              header.isCompressed || header.storedBytes == header.rawBytes,
              FragmentKind(rawValue: header.kind) != nil else {
            return (header, "its LSN, length, flag or kind fields are out of range")
        }
        guard bytes.loadUnaligned(fromByteOffset: offset + 38, as: UInt16.self) == 0 else {
            return (header, "its reserved bytes 38–39 are not zero")
        }
        let end = offset + WALFormat.frameHeaderBytes + Int(header.storedBytes)
        guard end <= bytes.count else { return (header, "its payload runs past the end of the segment") }
        let computed = CRC32C.extend(0, UnsafeRawBufferPointer(rebasing: bytes[(offset + 4)..<end]))
        guard computed == header.checksum else { return (header, "its checksum does not match") }
        return (header, nil)
    }
}
