import StrataCodec
import StrataFileIO
import Foundation
import Testing
@testable import StrataWAL

/// The last frame torn at every byte offset, three ways: the file cut there, the rest of
/// the frame zero-filled, or garbage-filled. Recovery must return exactly the earlier
/// batches (all of them when the damage left the frame's bytes unchanged), and the log
/// must take appends afterwards.
@Suite struct WALTornTailTests {
    enum Tear: CaseIterable { case cut, zeroFill, garbageFill }

    @Test(arguments: [1, 100, 4096, 65_536])
    func recoveryReturnsExactlyTheEarlierBatchesWhenTheLastFrameIsTorn(valueBytes: Int) throws {
        let seed = UInt64(valueBytes)
        print("seed \(seed)")
        var generator = BatchGenerator(seed: seed)
        let fileSystem = SimulatedFileSystem()
        let options = WALOptions(segmentBytes: 4096)
        let earlier = (0..<3).map { _ in generator.batch(operations: 2, maxValueBytes: 50) }
        let last = WALBatch([.put(key: [0xFF], value: generator.value(valueBytes, incompressible: true))])
        let (log, _, _) = try openLog(fileSystem, options: options)
        for batch in earlier + [last] { try log.append(batch) }
        try log.close()

        let (records, _) = try readLog(fileSystem)
        let lastRecord = try #require(records.last)
        let path = lastRecord.path
        let frameStart = Int(lastRecord.offset)
        let frameEnd = frameStart + WALFormat.frameHeaderBytes + lastRecord.storedBytes
        // The file ends with the frame, so each recovery reads only what the test is about.
        let original = Array(try #require(fileSystem.contents(of: path))[..<frameEnd])
        var garbage = generator.bytes(frameEnd - frameStart)
        garbage[0] ^= 0x01  // never equal to the frame's first byte by chance

        for offset in frameStart..<frameEnd {
            for tear in Tear.allCases {
                let image = tornImage(original, at: offset, tear, garbage: garbage, frameStart: frameStart)
                fileSystem.modify(path) { $0 = image }
                let unchanged = tear != .cut && image.withUnsafeBytes { new in
                    original.withUnsafeBytes { old in memcmp(new.baseAddress!, old.baseAddress!, old.count) == 0 }
                }
                let (recovered, report) = try readLog(fileSystem)
                let expected = unchanged ? earlier + [last] : earlier
                guard recovered.map(\.batch) == expected else {
                    Issue.record("\(tear) at offset \(offset) of a \(valueBytes)-byte frame: got \(recovered.count) batches")
                    return
                }
                #expect(report.damage.allSatisfy { !$0.isCorruption })
            }
        }

        // After the tear, the log takes appends, and a reopen returns the earlier batches and the new one.
        for offset in [frameStart, frameStart + 1, frameStart + 39, frameStart + 40, frameEnd - 1] {
            for tear in Tear.allCases {
                let copy = SimulatedFileSystem()
                try copy.createDirectoryDurably("/db/wal")
                for name in try fileSystem.contentsOfDirectory("/db/wal") where name.hasSuffix(".seg") {
                    let handle = try copy.open("/db/wal/" + name, options: [.create, .write])
                    let image = "/db/wal/" + name == path
                        ? tornImage(original, at: offset, tear, garbage: garbage, frameStart: frameStart)
                        : try #require(fileSystem.contents(of: "/db/wal/" + name))
                    try handle.write(image, at: 0)
                    try handle.sync()
                }
                try copy.syncDirectory("/db/wal")
                let (reopened, replayed, _) = try openLog(copy, options: options)
                #expect(replayed.map(\.batch) == earlier, "\(tear) at \(offset)")
                let extra = generator.batch()
                #expect(try reopened.append(extra) == LSN(4))
                try reopened.close()
                #expect(try readLog(copy).0.map(\.batch) == earlier + [extra], "\(tear) at \(offset)")
            }
        }
    }

    /// `original` with its bytes from `offset` on cut off, zeroed, or replaced by `garbage`
    /// (which covers the frame from `frameStart`). Built with memory copies: this runs
    /// hundreds of thousands of times in a debug build.
    private func tornImage(_ original: [UInt8], at offset: Int, _ tear: Tear, garbage: [UInt8], frameStart: Int) -> [UInt8] {
        let count = tear == .cut ? offset : original.count
        return [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            let target = UnsafeMutableRawBufferPointer(buffer)
            original.withUnsafeBytes { source in
                target.baseAddress!.copyMemory(from: source.baseAddress!, byteCount: min(offset, count))
            }
            switch tear {
            case .cut: break
            case .zeroFill: memset(target.baseAddress! + offset, 0, count - offset)
            case .garbageFill:
                garbage.withUnsafeBytes { source in
                    (target.baseAddress! + offset).copyMemory(from: source.baseAddress! + (offset - frameStart),
                                                              byteCount: count - offset)
                }
            }
            initialized = count
        }
    }

    @Test func aTornGroupWhoseLaterFramesLandedIsStillATornTail() throws {
        // Frames 2 and 3 written by one group; only frame 3's bytes reached the disk.
        let fileSystem = SimulatedFileSystem()
        var generator = BatchGenerator(seed: 8)
        let (log, _, _) = try openLog(fileSystem)
        let first = generator.batch()
        try log.append(first)
        try log.append(generator.batch())
        try log.append(generator.batch())
        try log.close()
        let (records, _) = try readLog(fileSystem)
        // Make frame 3 look as if it was written in the same group as frame 2 (its durable
        // LSN is 1), then destroy frame 2's header.
        let path = records[1].path
        fileSystem.modify(path) { image in
            let start = Int(records[2].offset)
            let end = start + WALFormat.frameHeaderBytes + records[2].storedBytes
            let payload = Array(image[(start + WALFormat.frameHeaderBytes)..<end])
            let header = image.withUnsafeBytes { FrameHeader.parse($0, at: start) }
            var writer = ByteWriter()
            payload.withUnsafeBytes { buffer in
                FrameHeader.encode(salt: header.salt, lsn: header.lsn, durableLSN: LSN(1),
                                   rawBytes: Int(header.rawBytes), batchBytes: Int(header.batchBytes),
                                   compressed: header.isCompressed, kind: FragmentKind(rawValue: header.kind)!,
                                   payload: buffer, into: &writer)
            }
            writer.write(contentsOf: payload)
            image.replaceSubrange(start..<end, with: writer.bytes)
            for index in Int(records[1].offset)..<(Int(records[1].offset) + 8) { image[index] = 0 }
        }
        let (reopened, replayed, report) = try openLog(fileSystem)
        #expect(replayed.map(\.batch) == [first])
        #expect(report.damage.count == 1 && !report.damage[0].isCorruption)
        try reopened.append(generator.batch())
        try reopened.close()
        // The remnant (old frame 3) must never come back: the new batch starts a new segment.
        let (final, finalReport) = try readLog(fileSystem)
        #expect(final.count == 2)
        #expect(final[1].lsn == LSN(2))
        #expect(finalReport.segmentCount == 2)
    }

    /// A group larger than the leader's kept memory is written a window at a time
    /// (`GroupFrames`), then synced once. Power cut at every one of its operations, every
    /// unsynced write then torn: recovery returns exactly the batch acknowledged before it,
    /// never a part of the group and never an error; with no cut, both batches. A group
    /// that fits the kept memory is one write.
    @Test func aGroupWrittenInWindowsIsAllOrNothingAcrossACrash() throws {
        let seed: UInt64 = 29
        print("seed \(seed)")
        var generator = BatchGenerator(seed: seed)
        let options = WALOptions(segmentBytes: 8 << 20)
        let base = SimulatedFileSystem()
        let first = generator.batch()
        var log = try openLog(base, options: options).log
        let writes = base.count(of: .write), segments = log.statistics.segmentsStarted
        try log.append(first)
        #expect(base.count(of: .write) - writes == 1 + log.statistics.segmentsStarted - segments, "a small group is one write")
        try log.close()
        // About six windows of incompressible bytes.
        var large = WALBatch()
        large.put(generator.bytes(8), generator.bytes(GroupFrames.keptBytes * 5 + 1_000))
        // The append's operations, counted on a copy.
        let counting = base.clone()
        log = try openLog(counting, options: options).log
        let start = counting.operationCount, windowWrites = counting.count(of: .write)
        try log.append(large)
        let operations = counting.operationCount - start
        #expect(counting.count(of: .write) - windowWrites >= 6, "the large group took several writes")
        try log.close()
        for cut in 0...operations {
            let fileSystem = base.clone()
            log = try openLog(fileSystem, options: options).log
            if cut < operations { fileSystem.cutPower(atOperation: fileSystem.operationCount + cut) }
            let acknowledged = (try? log.append(large)) != nil
            try? log.close()
            fileSystem.crash(.tornWrites(seed: seed &+ UInt64(cut)))
            let replayed = try openLog(fileSystem, options: options).records.map(\.batch)
            let expected = acknowledged ? [first, large] : [first]
            let recovered = replayed == expected  // compared out of #expect, which would print the batches
            #expect(recovered, "power cut at operation \(cut) of \(operations): \(replayed.count) batches recovered, \(expected.count) expected")
        }
    }
}
