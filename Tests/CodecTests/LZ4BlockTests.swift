import StrataCodec
import StrataFileIO
import Testing

@Suite struct LZ4BlockTests {
    @Test(arguments: [1, 100, 4096, 65_536, 1 << 20])
    func compressibleDataRoundTrips(count: Int) throws {
        let input = (0..<count).map { UInt8(($0 / 7) % 251) }
        guard let compressed = LZ4Block.compress(input) else {
            #expect(count < 16, "repetitive data of \(count) bytes should compress")
            return
        }
        #expect(compressed.count < input.count)
        #expect(try LZ4Block.decompress(compressed, decompressedCount: count) == input)
    }

    @Test func incompressibleDataIsReportedNotGrown() {
        var random = SplitMix64(seed: 7)
        let input = (0..<4096).map { _ in UInt8(truncatingIfNeeded: random.next()) }
        #expect(LZ4Block.compress(input) == nil)
        // Into a buffer with room for any block: still nil, the caller stores the bytes raw.
        let room = LZ4Block.compressBound(input.count)
        let block = input.withUnsafeBytes { input in
            withUnsafeTemporaryAllocation(byteCount: room, alignment: 1) { output in
                LZ4Block.compress(input, into: output, acceleration: LZ4Block.acceleration)
            }
        }
        #expect(block == nil)
    }

    /// Each thread compresses with a table it keeps (LZ4Block, invariant 3): a block must
    /// still refer to nothing before its own input. Random bytes do not compress alone; a
    /// block that reached back into the same bytes compressed just before would.
    @Test func aBlockNeverReachesIntoTheBlockBefore() throws {
        let seed: UInt64 = 41
        print("seed \(seed)")
        var random = SplitMix64(seed: seed)
        // Under 4 KiB (twice the count included) a block goes through the thread's table;
        // 60,000 through a zeroed one.
        for count in [64, 1000, 2000, 60_000] {
            let noise = (0..<count).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            #expect(LZ4Block.compress(noise) == nil)
            // A copy at another address: the table's entries point at the bytes before.
            let again = noise.withUnsafeBufferPointer { [UInt8]($0) }
            #expect(LZ4Block.compress(again) == nil, "\(count) random bytes compressed after the same bytes")
            let twice = noise + noise
            let compressed = try #require(LZ4Block.compress(twice))
            #expect(compressed.count < count + count / 8 + 16)
            #expect(try LZ4Block.decompress(compressed, decompressedCount: twice.count) == twice)
        }
    }

    /// A block that does not fit its output leaves the thread's table fit for the next.
    @Test func aBlockThatDidNotFitLeavesTheNextWhole() throws {
        let input = (0..<3000).map { UInt8(($0 / 5) % 199) }
        var small = [UInt8](repeating: 0, count: 16)
        let unfit = input.withUnsafeBytes { source in
            small.withUnsafeMutableBytes { LZ4Block.compress(source, into: $0, acceleration: 1) }
        }
        #expect(unfit == nil)
        var output = [UInt8](repeating: 0, count: LZ4Block.compressBound(input.count))
        let written = try #require(input.withUnsafeBytes { source in
            output.withUnsafeMutableBytes { LZ4Block.compress(source, into: $0, acceleration: 1) }
        })
        #expect(try LZ4Block.decompress(Array(output[..<written]), decompressedCount: input.count) == input)
    }

    /// Threads compressing at once each use their own table.
    @Test func threadsCompressAtOnce() async throws {
        let failures = try await withThrowingTaskGroup(of: Int.self) { group in
            for thread in 0..<4 {
                group.addTask {
                    var failures = 0
                    var random = SplitMix64(seed: UInt64(thread) + 1)
                    for round in 0..<500 {
                        let count = 32 + Int(random.next() % 3000)
                        let period = 1 + thread + round % 13
                        let input = (0..<count).map { UInt8(truncatingIfNeeded: ($0 % period) &* 31 &+ thread) }
                        guard let compressed = LZ4Block.compress(input),
                              try LZ4Block.decompress(compressed, decompressedCount: count) == input else {
                            failures += 1
                            continue
                        }
                    }
                    return failures
                }
            }
            return try await group.reduce(0, +)
        }
        #expect(failures == 0)
    }

    @Test func wrongDeclaredSizeIsAnError() throws {
        let input = [UInt8](repeating: 65, count: 1000)
        let compressed = try #require(LZ4Block.compress(input))
        #expect(throws: CodecError.self) { try LZ4Block.decompress(compressed, decompressedCount: 999) }
        #expect(throws: CodecError.self) { try LZ4Block.decompress(compressed, decompressedCount: 1001) }
        #expect(throws: CodecError.self) { try LZ4Block.decompress(compressed, decompressedCount: 0) }
        #expect(throws: CodecError.self) { try LZ4Block.decompress([], decompressedCount: 10) }
    }

    @Test func garbageNeverTraps() {
        let seed: UInt64 = 99
        print("seed \(seed)")
        var random = SplitMix64(seed: seed)
        for _ in 0..<2000 {
            let count = Int(random.next() % 64) + 1
            let garbage = (0..<count).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            let expected = Int(random.next() % 4096) + 1
            if let output = try? LZ4Block.decompress(garbage, decompressedCount: expected) {
                #expect(output.count == expected)
            }
        }
    }
}
