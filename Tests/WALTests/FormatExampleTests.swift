import StrataCodec
import StrataFileIO
import Testing
@testable import StrataWAL

/// The worked examples of FORMAT.md, byte for byte: if the format changes, this fails until
/// the document is changed with it.
@Suite struct FormatExampleTests {
    private func hex(_ bytes: [UInt8]) -> String {
        bytes.map { String($0, radix: 16).count == 1 ? "0" + String($0, radix: 16) : String($0, radix: 16) }
            .joined(separator: " ")
    }

    @Test func batchEncodingMatchesTheDocument() throws {
        let batch = WALBatch([.put(key: Array("k1".utf8), value: Array("v1".utf8)), .delete(key: Array("old".utf8))])
        #expect(hex(batch.encoded()) == "02 00 00 00 01 02 6b 31 02 76 31 02 03 6f 6c 64")
        let insert = WALBatch([.insert(key: Array("k2".utf8), value: Array("v2".utf8))])
        #expect(hex(insert.encoded()) == "01 00 00 00 03 02 6b 32 02 76 32")
        #expect(try WALBatch.decode(insert.encoded()) == insert)
    }

    @Test func aBatchMeasureIsItsEncodingsSizeAndItsKeyAndValueLengths() {
        let value = [UInt8](repeating: 7, count: 200) // a two-byte varint length
        let batch = WALBatch([.put(key: Array("k1".utf8), value: Array("v1".utf8)), .delete(key: Array("older".utf8)),
                              .insert(key: Array("k".utf8), value: value)])
        let measure = batch.measure
        #expect(measure.encodedByteCount == batch.encoded().count)
        #expect(measure.encodedByteCount == 4 + (1 + 1 + 2 + 1 + 2) + (1 + 1 + 5) + (1 + 1 + 1 + 2 + 200))
        #expect(measure.shortestKeyBytes == 1)
        #expect(measure.longestKeyBytes == 5)
        #expect(measure.longestValueBytes == 200)
        #expect(WALBatch().measure == WALBatch.Measure(encodedByteCount: 4, shortestKeyBytes: 0, longestKeyBytes: 0,
                                                       longestValueBytes: 0))
        #expect(WALBatch([.delete(key: [])]).measure.shortestKeyBytes == 0)
    }

    @Test func segmentHeaderMatchesTheDocument() {
        let header = SegmentHeader(salt: 0x1234_5678, sequence: 1, firstLSN: LSN(1), capacityBytes: 64 << 20)
        let bytes = header.encoded()
        #expect(hex(Array(bytes[0..<40])) == "53 54 52 41 54 57 41 4c 02 00 40 00 78 56 34 12 01 00 00 00 00 00 00 00 "
                + "01 00 00 00 00 00 00 00 00 00 00 04 00 00 00 00")
        #expect(bytes[40..<60].allSatisfy { $0 == 0 })
        #expect(hex(Array(bytes[60..<64])) == "9b 40 5e f3")
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

/// Format version 2 added the insert operation. A log whose last segment a version-1 writer
/// made is read as it is, and new frames go to a new segment with a version-2 header, so a
/// version-1 reader refuses the log by its version instead of calling kind 3 corruption.
@Suite struct WALFormatVersionTests {
    @Test func appendsAfterAVersion1SegmentStartANewSegment() throws {
        var generator = BatchGenerator(seed: 5)
        let fileSystem = SimulatedFileSystem()
        let old = (0..<3).map { _ in WALBatch(generator.batch(operations: 3).operations.map { $0.asPut }) }
        do {
            let (log, _, _) = try openLog(fileSystem)
            for batch in old { try log.append(batch) }
            try log.close()
        }
        let first = try firstSegmentPath(fileSystem)
        #expect(fileSystem.modify(first) { image in
            image[8] = 1
            let checksum = CRC32C.checksum(image[0..<60])
            withUnsafeBytes(of: checksum.littleEndian) { image.replaceSubrange(60..<64, with: $0) }
        })
        let (log, replayed, _) = try openLog(fileSystem)
        #expect(replayed.map(\.batch) == old)
        let new = WALBatch([.insert(key: [1], value: [2])])
        try log.append(new)
        let segments = log.segmentPaths
        try log.close()
        #expect(segments.count == 2 && segments[0] == first)
        let newBytes = try #require(fileSystem.contents(of: segments[1]))
        let oldBytes = try #require(fileSystem.contents(of: first))
        #expect(try SegmentHeader.decode(newBytes, path: segments[1]).version == 2)
        #expect(try SegmentHeader.decode(oldBytes, path: first).version == 1)
        #expect(try readLog(fileSystem).0.map(\.batch) == old + [new])
    }
}

extension WALBatch.Operation {
    /// The operation with an insert written as a put (what a version-1 writer wrote).
    var asPut: WALBatch.Operation {
        if case let .insert(key, value) = self { return .put(key: key, value: value) }
        return self
    }
}
