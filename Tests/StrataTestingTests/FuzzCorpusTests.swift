// Replays every saved fuzz input (Fuzz/Corpus/<target>/) through its target's body in the
// ordinary test run, so a regression of a decoder fix fails `swift test` without a fuzzer
// build. Each body stops the process if a promise breaks (FuzzTargets.swift).
import Foundation
@testable import StrataTesting
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
