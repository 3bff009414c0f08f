// The smaller findings of the second review of hostile logs, each failing before its fix:
// reserved bytes that must be zero, a header capacity that trapped, a batch's frames cut
// after its first fragment, a torn frame's byte count, and a batch decoded from fragments
// fed in any pieces.
import StrataCodec
import StrataFileIO
import Testing
@testable import StrataWAL

@Suite struct WALHostileFieldTests {
    private func log(_ batches: [WALBatch]) throws -> (SimulatedFileSystem, [WALRecord]) {
        let fileSystem = SimulatedFileSystem()
        let (log, _, _) = try openLog(fileSystem, options: WALOptions(segmentBytes: 8 << 20))
        for batch in batches { try log.append(batch) }
        try log.close()
        return (fileSystem, try readLog(fileSystem).0)
    }

    /// Reseals the checksum of the frame at `offset` of `bytes` (its payload as its header says).
    private func resealFrame(_ bytes: inout [UInt8], at offset: Int) {
        let stored = bytes.withUnsafeBytes { Int(UInt32(littleEndian: $0.loadUnaligned(fromByteOffset: offset + 24, as: UInt32.self))) }
        let checksum = CRC32C.checksum(bytes[(offset + 4)..<(offset + 40 + stored)])
        bytes.replaceSubrange(offset..<(offset + 4), with: withUnsafeBytes(of: checksum.littleEndian) { Array($0) })
    }

    /// Reseals the segment header's checksum (bytes 60–63 over 0–59).
    private func resealSegmentHeader(_ bytes: inout [UInt8]) {
        bytes.replaceSubrange(60..<64, with: withUnsafeBytes(of: CRC32C.checksum(bytes[0..<60]).littleEndian) { Array($0) })
    }

    @Test func aFrameWithNonZeroReservedBytesDoesNotVerify() throws {
        var generator = BatchGenerator(seed: 5)
        let (fileSystem, records) = try log((0..<3).map { _ in generator.batch() })
        let last = records[2]
        #expect(fileSystem.modify(last.path) { bytes in
            bytes[Int(last.offset) + 39] = 1
            resealFrame(&bytes, at: Int(last.offset))
        })
        let (after, report) = try readLog(fileSystem)
        #expect(after.count == 2)
        #expect(report.damage.count == 1 && report.damage[0].reason.contains("reserved bytes 38–39"), "\(report.damage)")
    }

    /// LSNs stay below 2^63 (FORMAT.md, R1): a last frame claiming 2^63 (checksum resealed)
    /// does not verify, and a segment header starting there is corruption.
    @Test func lsnsFromTwoToTheSixtyThirdAreRefused() throws {
        var generator = BatchGenerator(seed: 9)
        let (fileSystem, records) = try log((0..<2).map { _ in generator.batch() })
        let last = records[1]
        #expect(fileSystem.modify(last.path) { bytes in
            let at = Int(last.offset)
            bytes.replaceSubrange((at + 8)..<(at + 16), with: withUnsafeBytes(of: (UInt64(1) << 63).littleEndian) { Array($0) })
            resealFrame(&bytes, at: at)
        })
        let (after, report) = try readLog(fileSystem)
        #expect(after.count == 1)
        #expect(report.damage.first?.reason.contains("out of range") == true, "\(report.damage)")
        #expect(fileSystem.modify(last.path) { bytes in
            bytes.replaceSubrange(24..<32, with: withUnsafeBytes(of: (UInt64(1) << 63).littleEndian) { Array($0) })
            resealSegmentHeader(&bytes)
        })
        #expect {
            try readLog(fileSystem)
        } throws: { error in
            guard case let WALError.corruptSegmentHeader(_, reason) = error else { return false }
            return reason.contains("first LSN is out of range")
        }
    }

    @Test(arguments: [UInt64(0), 63, (1 << 30) + 1, 1 << 63, UInt64.max] as [UInt64])
    func aSegmentCapacityOutOfRangeIsCorruptionNotATrap(capacity: UInt64) throws {
        var generator = BatchGenerator(seed: 6)
        let (fileSystem, records) = try log([generator.batch()])
        #expect(fileSystem.modify(records[0].path) { bytes in
            bytes.replaceSubrange(32..<40, with: withUnsafeBytes(of: capacity.littleEndian) { Array($0) })
            resealSegmentHeader(&bytes)
        })
        #expect {
            try readLog(fileSystem)
        } throws: { error in
            guard case let WALError.corruptSegmentHeader(path, reason) = error else { return false }
            return path == records[0].path && reason.contains("capacity of \(capacity) bytes")
        }
    }

    @Test func nonZeroReservedHeaderBytesAreCorruption() throws {
        var generator = BatchGenerator(seed: 7)
        let (fileSystem, records) = try log([generator.batch()])
        #expect(fileSystem.modify(records[0].path) { bytes in
            bytes[50] = 0x80
            resealSegmentHeader(&bytes)
        })
        #expect {
            try readLog(fileSystem)
        } throws: { error in
            guard case let WALError.corruptSegmentHeader(_, reason) = error else { return false }
            return reason.contains("reserved bytes 40–59")
        }
    }

    /// A batch of two frames whose second is gone: the damage names the batch and how far it
    /// got, not the salt of the zeros after its first fragment.
    @Test func aLoneFirstFragmentIsReportedAsTheBatchItBegins() throws {
        var generator = BatchGenerator(seed: 8)
        let (fileSystem, records) = try log([generator.batch(), generator.batchOf(bytes: (1 << 20) + 100)])
        let big = records[1]
        #expect(big.frameCount == 2)
        let second = Int(big.offset) + WALFormat.frameBytes(payloadBytes: 1 << 20)
        #expect(fileSystem.modify(big.path) { bytes in
            for index in second..<(second + WALFormat.frameBytes(payloadBytes: 120)) { bytes[index] = 0 }
        })
        let (after, report) = try readLog(fileSystem)
        #expect(after.count == 1)
        #expect(report.damage.count == 1)
        let reason = report.damage.first?.reason ?? ""
        #expect(reason.contains("the batch of LSN 2 stops after 1 of its fragments") && !reason.contains("salt"), "\(reason)")
        #expect(report.damage.first?.offset == big.offset)
    }

    /// A torn frame is discarded whole: its header and its padded payload.
    @Test func aTornFrameCountsAllItsBytes() throws {
        let (fileSystem, records) = try log([WALBatch([.put(key: [1], value: [2])]), WALBatch([.put(key: Array("k".utf8), value: [UInt8](repeating: 9, count: 5))])])
        let last = records[1]
        #expect(last.storedBytes == 13)  // 4 + 1 + 1 + 1 + 1 + 5: a frame of 40 + 13, padded to 56
        #expect(fileSystem.modify(last.path) { $0[Int(last.offset) + 41] ^= 0xFF })
        let (_, report) = try readLog(fileSystem)
        #expect(report.damage.map(\.kind) == [.tornTail])
        #expect(report.damage.first?.byteCount == 56, "\(report.damage)")
    }

    /// The one batch decoder, fed a batch's bytes in pieces of every size from 1 byte up
    /// (as fragments arrive), gives the operations decoding it whole gives.
    @Test func aBatchFedInAnyPiecesDecodesAsAWhole() throws {
        let seed: UInt64 = 44
        print("seed \(seed)")
        var generator = BatchGenerator(seed: seed)
        var random = SplitMix64(seed: seed)
        for round in 0..<200 {
            let batch = generator.batch(operations: 1 + round % 9, maxValueBytes: round % 2 == 0 ? 20 : 400)
            let bytes = batch.encoded()
            var stream = BatchStream(batchBytes: bytes.count)
            var decoded: [WALBatch.Operation] = []
            var start = 0
            while start < bytes.count {
                let end = min(bytes.count, start + 1 + Int(random.next() % UInt64(round % 3 == 0 ? 3 : 64)))
                try Array(bytes[start..<end]).withUnsafeBytes { piece in
                    try stream.feed(piece) { kind, key, value in decoded.append(WALBatch.Operation(kind: kind, key: key, value: value)) }
                }
                start = end
            }
            try stream.finish()
            #expect(decoded == batch.operations, "round \(round)")
        }
    }

    /// Limits are checked as fields are read: a key length over 768 is refused at its
    /// offset though the key's bytes never arrive, and a count the batch cannot hold at 0.
    @Test func limitsAreCheckedWhenTheirFieldIsRead() throws {
        var stream = BatchStream(batchBytes: 1 << 20)
        #expect(throws: CodecError.lengthOverLimit(offset: 5, value: 769, limit: 768)) {
            try [UInt8]([1, 0, 0, 0, 1, 0x81, 0x06]).withUnsafeBytes { try stream.feed($0) { _, _, _ in } }
        }
        var counted = BatchStream(batchBytes: 10)
        #expect(throws: CodecError.lengthOverLimit(offset: 0, value: 3, limit: 2)) {
            try [UInt8]([3, 0, 0, 0]).withUnsafeBytes { try counted.feed($0) { _, _, _ in } }
        }
        var shortest = BatchStream(batchBytes: 1 << 20)
        #expect(throws: CodecError.nonShortestVarint(offset: 5)) {
            try [UInt8]([1, 0, 0, 0, 2, 0x81, 0x00]).withUnsafeBytes { try shortest.feed($0) { _, _, _ in } }
        }
    }
}
