// Replays every saved fuzz input (Fuzz/Corpus/<target>/) through its target's body in the
// ordinary test run, so a regression of a decoder fix fails `swift test` without a fuzzer
// build. Each body stops the process if a promise breaks (FuzzTargets.swift).
import Foundation
@testable import StrataTesting
import StrataEngine
import StrataFileIO
import Testing

@Suite struct FuzzCorpusTests {
    static let corpus = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fuzz/Corpus")

    @Test(arguments: FuzzTargets.all.map(\.name))
    func savedInputsRunClean(target: String) throws {
        let run = try #require(FuzzTargets.all.first { $0.name == target }?.run)
        let folder = Self.corpus.appendingPathComponent(target)
        let inputs = try FileManager.default.contentsOfDirectory(atPath: folder.path).sorted()
        #expect(!inputs.isEmpty, "no saved inputs in \(folder.path)")
        for name in inputs {
            run(Array(try Data(contentsOf: folder.appendingPathComponent(name))))
        }
        print("\(target): \(inputs.count) saved input(s) replayed")
    }
}

/// The EnginePage seed of a compressed leaf reaches its expansion: the store opens, finds
/// each of its keys, and `verify` walks one compressed leaf.
@Suite struct EnginePageSeedTests {
    @Test func theCompressedLeafSeedExpands() throws {
        let input = Array(try Data(contentsOf: FuzzCorpusTests.corpus.appendingPathComponent("EnginePage/compressed-leaf")))
        let fileSystem = try #require(FuzzTargets.enginePageStore(input))
        let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem)
        #expect(try engine.snapshot().get(Array("k".utf8)) == Array("kkkkkkkkkkkkkkkk-middle".utf8))
        #expect(try engine.snapshot().scan().map(\.key) == ["a", "k", "z"].map { Array($0.utf8) })
        let report = engine.verify()
        // (The harness's meta page counts no keys: that is the one problem.)
        #expect(report.leafPages == 1 && report.compressedLeafPages == 1 && report.keys == 3 && report.problems.count == 1, "\(report)")
        try engine.close(checkpoint: false)
    }
}

/// The EnginePage seed of a compressed leaf in pieces (format 7), read from a real file
/// through a mapping as byte 0's bit 3 asks: each of its keys is found in its piece, a key
/// between two is not, a scan reads the whole expansion, and `verify` walks the leaf.
@Suite struct EnginePagePiecedSeedTests {
    @Test func thePiecedLeafSeedReadsEachPiece() throws {
        let input = Array(try Data(contentsOf: FuzzCorpusTests.corpus.appendingPathComponent("EnginePage/pieced-leaf")))
        #expect(input[0] & 8 != 0 && input[3 + 5] == 15 && input[3 + 36] > 1, "a mapped leaf of several pieces")
        let simulated = try #require(FuzzTargets.enginePageStore(input))
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("strata-seed-\(UUID().uuidString)")
        defer { try? FileManager.default.removeItem(at: directory) }
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        try Data(try #require(simulated.contents(of: "/db/data"))).write(to: directory.appendingPathComponent("data"))
        let (engine, _) = try StorageEngine.open(path: directory.path, fileSystem: POSIXFileSystem())
        let snapshot = engine.snapshot()
        for index in 0..<48 {
            let value = Array(String(format: "value-%02d", index).utf8) + [UInt8](repeating: UInt8(ascii: "v"), count: 112)
            #expect(try snapshot.get(Array(String(format: "key-%02d", index).utf8)) == value, "key-\(index)")
            #expect(try snapshot.get(Array(String(format: "key-%02d+", index).utf8)) == nil)
        }
        #expect(try snapshot.get(Array("key-".utf8)) == nil && snapshot.get(Array("kez".utf8)) == nil)
        #expect(try snapshot.scan().map(\.key) == (0..<48).map { Array(String(format: "key-%02d", $0).utf8) })
        let report = engine.verify()
        // (The harness's meta page counts no keys: that is the one problem.)
        #expect(report.leafPages == 1 && report.compressedLeafPages == 1 && report.keys == 48 && report.problems.count == 1, "\(report)")
        try engine.close(checkpoint: false)
        // The target itself takes the same path.
        FuzzTargets.enginePage(input)
    }
}

/// The EnginePage seed of a leaf that stores its keys' shared prefix once (format 6,
/// FORMAT.md "Elided prefixes") reads: every key is found and scanned whole, and `verify`
/// walks the leaf.
@Suite struct EnginePageElidedSeedTests {
    @Test func theElidedLeafSeedReads() throws {
        let input = Array(try Data(contentsOf: FuzzCorpusTests.corpus.appendingPathComponent("EnginePage/elided-leaf")))
        let fileSystem = try #require(FuzzTargets.enginePageStore(input))
        let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem)
        for name in ["a", "k", "z"] {
            #expect(try engine.snapshot().get(Array("key-\(name)".utf8)) == Array("v-\(name)".utf8))
        }
        #expect(try engine.snapshot().get(Array("key-".utf8)) == nil && engine.snapshot().get(Array("kex-k".utf8)) == nil)
        #expect(try engine.snapshot().scan().map(\.key) == ["key-a", "key-k", "key-z"].map { Array($0.utf8) })
        #expect(try engine.snapshot().scan(reverse: true).map(\.key) == ["key-z", "key-k", "key-a"].map { Array($0.utf8) })
        let report = engine.verify()
        // (The harness's meta page counts no keys: that is the one problem.)
        #expect(report.leafPages == 1 && report.keys == 3 && report.problems.count == 1, "\(report)")
        try engine.close(checkpoint: false)
    }
}

/// The EnginePage seed of an overflow run reaches the run's read: the store opens, its one
/// key's value of 5,000 bytes comes from a run of two pages, and `verify` counts them.
@Suite struct EnginePageRunSeedTests {
    @Test func theOverflowRunSeedReads() throws {
        let input = Array(try Data(contentsOf: FuzzCorpusTests.corpus.appendingPathComponent("EnginePage/overflow-run")))
        let fileSystem = try #require(FuzzTargets.enginePageStore(input))
        let (engine, _) = try StorageEngine.open(path: "/db", fileSystem: fileSystem)
        #expect(try engine.snapshot().get(Array("k".utf8)) == (0..<5_000).map { UInt8(ascii: "a") + UInt8($0 % 26) })
        let report = engine.verify()
        // (The harness's meta page counts no keys: that is the one problem.)
        #expect(report.leafPages == 1 && report.overflowPages == 2 && report.keys == 1 && report.problems.count == 1, "\(report)")
        try engine.close(checkpoint: false)
    }
}

/// The StoreLog target's seeds reach what they aim at: a well-formed log opens and
/// checkpoints; each batch no commit writes is refused as a corrupt batch; a sequence
/// number past any a log reaches is a corrupt header.
@Suite struct StoreLogSeedTests {
    @Test(arguments: [
        ("two-batches", "checkpointed 2"), ("compressed", "checkpointed 1"), ("empty-key", "corrupt"),
        ("key-over-limit", "corrupt"), ("count-off-by-one", "corrupt"), ("trailing-bytes", "corrupt"),
        ("unknown-kind", "corrupt"), ("sequence-max", "header"), ("sequence-2-62", "header"),
    ])
    func seed(name: String, expected: String) throws {
        let input = Array(try Data(contentsOf: FuzzCorpusTests.corpus.appendingPathComponent("StoreLog/\(name)")))
        let outcome = FuzzTargets.storeLogOutcome(input)
        switch outcome {
        case let .checkpointedAndReopened(keys): #expect(expected == "checkpointed \(keys)", "\(name): \(outcome)")
        case let .refused(message) where expected == "corrupt": #expect(message.contains("corrupt"), "\(name): \(message)")
        case let .refused(message) where expected == "header": #expect(message.contains("segment header"), "\(name): \(message)")
        default: Issue.record("\(name): \(outcome), expected \(expected)")
        }
    }
}
