// Fuzzes the write-ahead log reader: any bytes after a valid segment header must give
// batches or a typed error, never a trap, a hang or a huge allocation.
//
// Input: byte 0 chooses the mode. Mode 0: the rest is the segment body as is. Mode 1: the
// rest is a sequence of (36 header bytes, payload) pieces; the harness sets each frame's
// salt and checksum so the fuzzer reaches decompression, fragments and batch decoding.
import Codec
import FileIO
import WAL

let salt: UInt32 = 0x5354_5241

func littleEndian<T: FixedWidthInteger>(_ value: T) -> [UInt8] {
    withUnsafeBytes(of: value.littleEndian) { Array($0) }
}

func segmentHeader() -> [UInt8] {
    var header = Array("STRATWAL".utf8) + littleEndian(UInt16(1)) + littleEndian(UInt16(64)) + littleEndian(salt)
    header += littleEndian(UInt64(1)) + littleEndian(UInt64(1)) + littleEndian(UInt64(4096))
    header += [UInt8](repeating: 0, count: 60 - header.count)
    return header + littleEndian(CRC32C.checksum(header))
}

func framesWithValidChecksums(_ input: ArraySlice<UInt8>) -> [UInt8] {
    var body: [UInt8] = []
    var rest = input
    while rest.count >= 36 {
        var fields = Array(rest.prefix(36))
        rest = rest.dropFirst(36)
        fields.replaceSubrange(0..<4, with: littleEndian(salt))
        let declared = fields.withUnsafeBytes { Int(UInt32(littleEndian: $0.loadUnaligned(fromByteOffset: 20, as: UInt32.self))) }
        let payload = Array(rest.prefix(min(declared, rest.count)))
        rest = rest.dropFirst(payload.count)
        let checksum = CRC32C.extend(CRC32C.checksum(fields), payload)
        body += littleEndian(checksum) + fields + payload
        body += [UInt8](repeating: 0, count: (8 - body.count % 8) % 8)
    }
    return body
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let input = Array(UnsafeBufferPointer(start: data, count: size))
    guard let mode = input.first else { return 0 }
    let body = mode & 1 == 0 ? Array(input.dropFirst()) : framesWithValidChecksums(input.dropFirst())
    let fileSystem = SimulatedFileSystem()
    do {
        try fileSystem.createDirectory("/wal")
        let file = try fileSystem.open("/wal/wal-0000000000000001.seg", options: [.create, .write])
        try file.write(segmentHeader() + body, at: 0)
    } catch {
        fatalError("the simulated file system failed: \(error)")
    }
    for recoveryMode in [RecoveryMode.strict, .skipCorrupted] {
        var expected = LSN(1)
        _ = try? WriteAheadLog.read(directory: "/wal", fileSystem: fileSystem, mode: recoveryMode) { record in
            precondition(recoveryMode == .skipCorrupted || record.lsn == expected, "batches out of order")
            precondition(record.lsn >= expected, "LSN went backwards")
            precondition(WALBatch(record.batch.operations).encoded().count == record.rawBytes, "batch size mismatch")
            expected = record.lsn.next
        }
    }
    return 0
}
