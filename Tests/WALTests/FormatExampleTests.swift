import StrataCodec
import Testing
@testable import StrataWAL

/// The worked examples of FORMAT.md, byte for byte: if the format changes, this fails until
/// the document is changed with it.
@Suite struct FormatExampleTests {
    private func hex(_ bytes: [UInt8]) -> String {
        bytes.map { String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16) }
            .joined(separator: " ")
    }

    @Test func batchEncodingMatchesTheDocument() {
        let batch = WALBatch([.put(key: Array("k1".utf8), value: Array("v1".utf8)), .delete(key: Array("old".utf8))])
        #expect(hex(batch.encoded()) == "02 00 00 00 01 02 6b 31 02 76 31 02 03 6f 6c 64")
    }

    @Test func segmentHeaderMatchesTheDocument() {
        let header = SegmentHeader(salt: 0x1234_5678, sequence: 1, firstLSN: LSN(1), capacityBytes: 64 << 20)
        let bytes = header.encoded()
        #expect(hex(Array(bytes[0..<40])) == "53 54 52 41 54 57 41 4c 01 00 40 00 78 56 34 12 01 00 00 00 00 00 00 00 "
                + "01 00 00 00 00 00 00 00 00 00 00 04 00 00 00 00")
        #expect(bytes[40..<60].allSatisfy { $0 == 0 })
        #expect(hex(Array(bytes[60..<64])) == "94 2b 01 1a")
    }

    @Test func frameMatchesTheDocument() {
        let batch = WALBatch([.put(key: Array("k1".utf8), value: Array("v1".utf8)), .delete(key: Array("old".utf8))])
        let raw = batch.encoded()
        var writer = ByteWriter()
        raw.withUnsafeBytes { payload in
            FrameHeader.encode(salt: 0x1234_5678, lsn: LSN(7), durableLSN: LSN(6), rawBytes: raw.count,
                               batchBytes: raw.count, compressed: false, kind: .full, payload: payload, into: &writer)
        }
        #expect(hex(writer.bytes) == "6b 8a e0 fd 78 56 34 12 07 00 00 00 00 00 00 00 06 00 00 00 00 00 00 00 "
                + "10 00 00 00 10 00 00 00 10 00 00 00 00 01 00 00")
        #expect(WALFormat.frameBytes(payloadBytes: raw.count) == 56)
    }
}
