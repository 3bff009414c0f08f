import StrataCodec
import StrataFileIO
import Foundation
import Testing
@testable import StrataWAL

/// Damage that is not a torn tail: bit flips anywhere, broken headers, files from a newer
/// format, and the salvage modes that recover around corruption when asked to.
@Suite struct WALCorruptionTests {
    /// A log of `count` batches, each appended (and synced) on its own, in one segment.
    private func smallLog(count: Int = 4, seed: UInt64 = 21) throws -> (SimulatedFileSystem, [WALBatch], [WALRecord]) {
        var generator = BatchGenerator(seed: seed)
        let fileSystem = SimulatedFileSystem()
        let batches = (0..<count).map { _ in generator.batch(operations: 2, maxValueBytes: 40) }
        let (log, _, _) = try openLog(fileSystem, options: WALOptions(segmentBytes: 4096))
        for batch in batches { try log.append(batch) }
        try log.close()
        return (fileSystem, batches, try readLog(fileSystem).0)
    }

    @Test func oneFlippedBitInEveryByteIsDetectedOrCutAsTheTailNeverReturnedAsData() throws {
        let (fileSystem, batches, records) = try smallLog()
        let path = records[0].path
        let original = try #require(fileSystem.contents(of: path))
        let frameStarts = records.map { Int($0.offset) }
        let frameEnds = records.map { Int($0.offset) + WALFormat.frameHeaderBytes + $0.storedBytes }
        let logEnd = WALFormat.frameBytes(payloadBytes: records.last!.storedBytes) + frameStarts.last!
        var outcomes = (errors: 0, tails: 0, intact: 0)
        for position in 0..<(logEnd + 64) {
            var image = original
            image[position] ^= UInt8(1) << UInt8(position % 8)
            fileSystem.modify(path) { $0 = image }
            let frame = frameStarts.indices.first { frameStarts[$0] <= position && position < frameEnds[$0] }
            do {
                let (recovered, _) = try readLog(fileSystem)
                if let frame {
                    // Only damage to the last frame may be read as a torn tail.
                    #expect(frame == batches.count - 1, "a flip at \(position) in frame \(frame) was not reported")
                    #expect(recovered.map(\.batch) == Array(batches.prefix(frame)), "flip at \(position)")
                    outcomes.tails += 1
                } else {
                    // Padding between frames and the unused space after them carry no data.
                    #expect(position >= WALFormat.segmentHeaderBytes, "a flip in the segment header at \(position) was not reported")
                    #expect(recovered.map(\.batch) == batches, "flip at \(position)")
                    outcomes.intact += 1
                }
            } catch let error as WALError {
                switch error {
                case .corruptSegmentHeader, .corruptFrame: outcomes.errors += 1
                default: Issue.record("flip at \(position): unexpected \(error)")
                }
                #expect(frame != batches.count - 1, "a flip in the last frame at \(position) should be a torn tail")
            }
        }
        print("bit flips: \(outcomes.errors) reported, \(outcomes.tails) cut as tail, \(outcomes.intact) harmless")
        #expect(outcomes.errors > 0 && outcomes.tails > 0 && outcomes.intact > 0)
    }

    @Test func corruptionInTheMiddleNamesTheFileAndOffset() throws {
        let (fileSystem, _, records) = try smallLog()
        let damaged = Int(records[1].offset) + WALFormat.frameHeaderBytes
        fileSystem.modify(records[1].path) { $0[damaged] ^= 0xFF }
        #expect {
            try readLog(fileSystem)
        } throws: { error in
            guard case let WALError.corruptFrame(path, offset, lsn, _) = error else { return false }
            return path == records[1].path && offset == records[1].offset && lsn == LSN(2)
        }
        // Opening refuses too, and changes nothing on disk.
        let before = fileSystem.contents(of: records[1].path)
        #expect(throws: WALError.self) { try openLog(fileSystem) }
        #expect(fileSystem.contents(of: records[1].path) == before)
    }

    @Test func salvageModesRecoverAroundCorruptionWhenAskedTo() throws {
        let (fileSystem, batches, records) = try smallLog(count: 5)
        let damaged = Int(records[2].offset) + 12
        fileSystem.modify(records[2].path) { $0[damaged] ^= 0x40 }

        let (pointInTime, report) = try readLog(fileSystem, mode: .pointInTime)
        #expect(pointInTime.map(\.batch) == Array(batches.prefix(2)))
        #expect(report.damage.count == 1 && report.damage[0].isCorruption)

        let (tolerant, _) = try readLog(fileSystem, mode: .tolerateCorruptedTail)
        #expect(tolerant.map(\.batch) == Array(batches.prefix(2)))

        let (skipped, skipReport) = try readLog(fileSystem, mode: .skipCorrupted)
        #expect(skipped.map(\.lsn) == [LSN(1), LSN(2), LSN(4), LSN(5)])
        #expect(skipped.map(\.batch) == [batches[0], batches[1], batches[3], batches[4]])
        #expect(skipReport.damage.count == 1)

        // Opening with point-in-time recovery cuts the log there; a strict reopen then agrees.
        var options = WALOptions(segmentBytes: 4096, recoveryMode: .pointInTime)
        let (log, replayed, _) = try openLog(fileSystem, options: options)
        #expect(replayed.count == 2)
        #expect(try log.append(WALBatch([.delete(key: [9])])) == LSN(3))
        try log.close()
        options.recoveryMode = .strict
        let (_, strict, _) = try openLog(fileSystem, options: options)
        #expect(strict.map(\.batch) == Array(batches.prefix(2)) + [WALBatch([.delete(key: [9])])])
    }

    @Test func aCorruptSegmentHeaderIsAnErrorNamingTheFile() throws {
        let (fileSystem, _, records) = try smallLog()
        fileSystem.modify(records[0].path) { $0[20] ^= 1 }
        #expect {
            try readLog(fileSystem)
        } throws: { error in
            guard case let WALError.corruptSegmentHeader(path, _) = error else { return false }
            return path == records[0].path
        }
    }

    @Test func aSegmentFromANewerFormatIsRefusedWithTheVersion() throws {
        let (fileSystem, _, records) = try smallLog()
        fileSystem.modify(records[0].path) { image in
            image[8] = UInt8(WALFormat.version + 1)
            let checksum = CRC32C.checksum(image[0..<60])
            withUnsafeBytes(of: checksum.littleEndian) { for index in 0..<4 { image[60 + index] = $0[index] } }
        }
        #expect {
            try readLog(fileSystem)
        } throws: { error in
            guard case let WALError.unsupportedVersion(_, found, supported) = error else { return false }
            return found == WALFormat.version + 1 && supported == WALFormat.version
        }
    }

    @Test func aMissingSegmentIsAHoleNotATail() throws {
        var generator = BatchGenerator(seed: 2)
        let fileSystem = SimulatedFileSystem()
        let (log, _, _) = try openLog(fileSystem, options: WALOptions(segmentBytes: 4096))
        for _ in 0..<60 { try log.append(generator.batch(maxValueBytes: 300)) }
        let segments = log.segmentPaths
        try log.close()
        #expect(segments.count >= 3)
        try fileSystem.removeFile(segments[1])
        #expect {
            try readLog(fileSystem)
        } throws: { error in
            if case WALError.missingData = error { return true }
            return false
        }
    }

    @Test func aHostileOversizedSegmentFileIsRefusedWithoutLoadingIt() throws {
        // On the real file system, where a sparse file of over 1 GiB costs nothing.
        let directory = NSTemporaryDirectory() + "strata-wal-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let fileSystem = POSIXFileSystem()
        let (log, _) = try WriteAheadLog.open(directory: directory, fileSystem: fileSystem,
                                              options: WALOptions(segmentBytes: 4096))
        try log.append(WALBatch([.put(key: [1], value: [2])]))
        let path = log.segmentPaths[0]
        try log.close()
        let handle = try fileSystem.open(path, options: [.write])
        try handle.truncate(to: WALFormat.maxSegmentFileBytes + 1)
        try handle.close()
        #expect {
            try WriteAheadLog.read(directory: directory, fileSystem: fileSystem) { _ in }
        } throws: { error in
            guard case let WALError.segmentTooLarge(reported, _, _) = error else { return false }
            return reported == path
        }
    }
}

extension WALCorruptionTests {
    /// Found by the WALFrames fuzz target: in skip-corrupted mode a verified frame with LSN
    /// 2^64 − 1 was accepted and computing the LSN after it overflowed (a trap).
    @Test(arguments: [RecoveryMode.strict, .skipCorrupted, .pointInTime])
    func aFrameWithTheLargestLSNIsDamageNotATrap(mode: RecoveryMode) throws {
        let (fileSystem, batches, records) = try smallLog(count: 3)
        let last = records[2]
        fileSystem.modify(last.path) { image in
            let start = Int(last.offset)
            let end = start + WALFormat.frameHeaderBytes + last.storedBytes
            var header = image.withUnsafeBytes { FrameHeader.parse($0, at: start) }
            header.lsn = LSN(UInt64.max)
            var writer = ByteWriter()
            let payload = Array(image[(start + WALFormat.frameHeaderBytes)..<end])
            payload.withUnsafeBytes { buffer in
                FrameHeader.encode(salt: header.salt, lsn: header.lsn, durableLSN: header.durableLSN,
                                   rawBytes: Int(header.rawBytes), batchBytes: Int(header.batchBytes),
                                   compressed: header.isCompressed, kind: FragmentKind(rawValue: header.kind)!,
                                   payload: buffer, into: &writer)
            }
            image.replaceSubrange(start..<(start + WALFormat.frameHeaderBytes), with: writer.bytes)
        }
        let (recovered, report) = try readLog(fileSystem, mode: mode)
        #expect(recovered.map(\.batch) == Array(batches.prefix(2)))
        #expect(report.damage.count == 1)
    }
}
