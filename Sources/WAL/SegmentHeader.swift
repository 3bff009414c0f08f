// The 64-byte header at the start of every segment file (FORMAT.md, "Segment header").
//
// A header is written and synced in a temporary file before the file gets its segment
// name, so every file that carries a segment name has a complete header: a header that
// does not verify is corruption, never a half-created segment.
import StrataCodec

struct SegmentHeader: Equatable {
    /// Chosen at random (never 0) each time the header is written; every frame of this
    /// use of the file repeats it, so frames left from an earlier use never verify.
    var salt: UInt32
    /// Position in the log; segment files are consecutive.
    var sequence: UInt64
    /// The LSN of the first frame this segment holds.
    var firstLSN: LSN
    /// The size the file was preallocated to when the header was written.
    var capacityBytes: UInt64
    /// The format version the header carries: `WALFormat.version` for a header this code
    /// writes, possibly older for one it read.
    var version = WALFormat.version

    func encoded() -> [UInt8] {
        var writer = ByteWriter(capacity: WALFormat.segmentHeaderBytes)
        writer.write(contentsOf: WALFormat.magic)
        writer.write(version)
        writer.write(UInt16(WALFormat.segmentHeaderBytes))
        writer.write(salt)
        writer.write(sequence)
        writer.write(firstLSN.rawValue)
        writer.write(capacityBytes)
        writer.writeZeros(WALFormat.segmentHeaderBytes - 4 - writer.count)
        writer.write(CRC32C.checksum(writer.bytes))
        return writer.bytes
    }

    /// Decodes and verifies a header read from the file at `path`.
    static func decode(_ bytes: [UInt8], path: String) throws(WALError) -> SegmentHeader {
        let size = WALFormat.segmentHeaderBytes
        guard bytes.count >= size else {
            throw .corruptSegmentHeader(path: path, reason: "the file is \(bytes.count) bytes, shorter than a header")
        }
        guard Array(bytes[0..<8]) == WALFormat.magic else {
            throw .corruptSegmentHeader(path: path, reason: "the magic number is wrong")
        }
        let stored = bytes.withUnsafeBytes { UInt32(littleEndian: $0.loadUnaligned(fromByteOffset: size - 4, as: UInt32.self)) }
        let computed = bytes.withUnsafeBytes { CRC32C.extend(0, UnsafeRawBufferPointer(rebasing: $0[0..<(size - 4)])) }
        guard stored == computed else {
            throw .corruptSegmentHeader(path: path, reason: "its checksum does not match")
        }
        do {
            var reader = ByteReader(bytes, start: 8, end: size - 4)
            let version = try reader.readUInt16()
            guard version <= WALFormat.version else {
                throw WALError.unsupportedVersion(path: path, found: version, supported: WALFormat.version)
            }
            let headerBytes = try reader.readUInt16()
            guard headerBytes == UInt16(size) else {
                throw WALError.corruptSegmentHeader(path: path, reason: "it declares a header of \(headerBytes) bytes")
            }
            let header = SegmentHeader(salt: try reader.readUInt32(), sequence: try reader.readUInt64(),
                                       firstLSN: LSN(try reader.readUInt64()), capacityBytes: try reader.readUInt64(),
                                       version: version)
            guard header.salt != 0, header.firstLSN > .none, header.firstLSN.rawValue < WALFormat.lsnLimit else {
                throw WALError.corruptSegmentHeader(path: path, reason: "its salt or first LSN is out of range")
            }
            guard header.capacityBytes >= UInt64(size), header.capacityBytes <= UInt64(WALFormat.maxSegmentFileBytes) else {
                throw WALError.corruptSegmentHeader(path: path, reason:
                    "its capacity of \(header.capacityBytes) bytes is outside \(size) … \(WALFormat.maxSegmentFileBytes)")
            }
            // Bytes 40–59 are reserved: zero in every header this format writes.
            guard bytes[40..<(size - 4)].allSatisfy({ $0 == 0 }) else {
                throw WALError.corruptSegmentHeader(path: path, reason: "its reserved bytes 40–59 are not zero")
            }
            return header
        } catch let error as WALError {
            throw error
        } catch {
            throw .corruptSegmentHeader(path: path, reason: "\(error)")
        }
    }
}
