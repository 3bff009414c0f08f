// Replays every saved fuzz input (Fuzz/Corpus/<target>/) through its target's body in the
// ordinary test run, so a regression of a decoder fix fails `swift test` without a fuzzer
// build. Each body stops the process if a promise breaks (FuzzTargets.swift).
import Foundation
import StrataTesting
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
