// Runs the `strata` tool as a process, the way users and scripts do.
import Foundation
import StrataFileIO

/// What a run of `strata` printed and how it exited.
struct ToolRun {
    var status: Int32
    var stdout: String
    var stderr: String

    var lines: [String] { stdout.split(separator: "\n", omittingEmptySubsequences: true).map(String.init) }
}

/// The built `strata` executable: next to the test bundle (same build directory).
let strataExecutable: URL = {
    let candidates = [
        Bundle.main.executableURL?.deletingLastPathComponent(),
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent(),
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent().appendingPathComponent(".build/debug"),
    ]
    for case let directory? in candidates {
        let tool = directory.appendingPathComponent("strata")
        if FileManager.default.isExecutableFile(atPath: tool.path) { return tool }
    }
    fatalError("the strata executable is not built next to the tests; run `swift build` first")
}()

/// Runs `strata arguments…` on a terminal: under util-linux `script`, which gives it a
/// pseudo-terminal and types `input` into it. `HOME` is `directory` (the shell's history
/// file goes there). The output is what the terminal showed, echo and prompts included.
func runStrataOnATerminal(_ arguments: [String], input: String, in directory: URL) throws -> ToolRun {
    let process = Process()
    process.executableURL = URL(fileURLWithPath: "/usr/bin/script")
    let command = ([strataExecutable.path] + arguments).map { "'\($0)'" }.joined(separator: " ")
    process.arguments = ["--quiet", "--return", "--command", command, "/dev/null"]
    process.currentDirectoryURL = directory
    process.environment = toolEnvironment(["HOME": directory.path, "TERM": "xterm"])
    let stdout = Pipe()
    process.standardError = stdout
    let (status, output) = try communicate(process, input: input, stdout: stdout)
    return ToolRun(status: status, stdout: output, stderr: "")
}

/// The environment the tool runs in: this process's, without crash backtraces, plus `extra`.
private func toolEnvironment(_ extra: [String: String] = [:]) -> [String: String] {
    var environment = ProcessInfo.processInfo.environment
    environment["SWIFT_BACKTRACE"] = "enable=no"
    return environment.merging(extra) { $1 }
}

/// Runs `process` with `input` on its stdin and `stdout` as its stdout; returns its exit
/// status and everything it wrote there.
private func communicate(_ process: Process, input: String, stdout: Pipe) throws -> (status: Int32, output: String) {
    let stdin = Pipe()
    process.standardInput = stdin
    process.standardOutput = stdout
    try process.run()
    stdin.fileHandleForWriting.write(Data(input.utf8))
    try stdin.fileHandleForWriting.close()
    let output = stdout.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: output, as: UTF8.self))
}

/// Runs `strata arguments…` in `directory` with `input` on stdin (not a terminal).
func runStrata(_ arguments: [String], input: String = "", in directory: URL) throws -> ToolRun {
    let process = Process()
    process.executableURL = strataExecutable
    process.arguments = arguments
    process.currentDirectoryURL = directory
    process.environment = toolEnvironment()
    // stderr goes to a file, so the child can never stall on a full pipe nobody reads.
    let errorPath = FileManager.default.temporaryDirectory.appendingPathComponent("strata-stderr-\(UUID().uuidString)")
    _ = FileManager.default.createFile(atPath: errorPath.path, contents: nil)
    defer { try? FileManager.default.removeItem(at: errorPath) }
    let stderr = try FileHandle(forWritingTo: errorPath)
    defer { try? stderr.close() }
    process.standardError = stderr
    let (status, output) = try communicate(process, input: input, stdout: Pipe())
    return ToolRun(status: status, stdout: output, stderr: (try? String(contentsOf: errorPath, encoding: .utf8)) ?? "")
}

/// A fresh scratch directory, removed by the caller.
func scratchDirectory() throws -> URL {
    let url = FileManager.default.temporaryDirectory.appendingPathComponent("strata-cli-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    return url
}

/// How a run of `strata` with a time limit ended.
struct LimitedRun {
    var run: ToolRun
    /// Killed by a signal it did not send itself (a crash: SIGILL, SIGSEGV, SIGBUS…).
    var signalled: Bool
    /// Still running at the limit (then killed).
    var timedOut: Bool
}

/// Runs `strata arguments…` in `directory`, killing it once `seconds` have passed.
func runStrata(_ arguments: [String], in directory: URL, limit seconds: Double) throws -> LimitedRun {
    try runProgram(strataExecutable, arguments, in: directory, limit: seconds)
}

/// Runs `program arguments…` in `directory`, killing it once `seconds` have passed.
func runProgram(_ program: URL, _ arguments: [String], in directory: URL, limit seconds: Double) throws -> LimitedRun {
    let process = Process()
    process.executableURL = program
    process.arguments = arguments
    process.currentDirectoryURL = directory
    process.environment = toolEnvironment()
    let outputs = (0..<2).map { _ in FileManager.default.temporaryDirectory.appendingPathComponent("strata-out-\(UUID().uuidString)") }
    defer { for url in outputs { try? FileManager.default.removeItem(at: url) } }
    for url in outputs { _ = FileManager.default.createFile(atPath: url.path, contents: nil) }
    let handles = try outputs.map { try FileHandle(forWritingTo: $0) }
    defer { for handle in handles { try? handle.close() } }
    process.standardOutput = handles[0]
    process.standardError = handles[1]
    process.standardInput = FileHandle.nullDevice
    try process.run()
    let deadline = Date().addingTimeInterval(seconds)
    var timedOut = false
    while process.isRunning {
        if Date() > deadline {
            timedOut = true
            kill(process.processIdentifier, SIGKILL)
            break
        }
        usleep(2_000)
    }
    process.waitUntilExit()
    let text = outputs.map { (try? String(contentsOf: $0, encoding: .utf8)) ?? "" }
    return LimitedRun(run: ToolRun(status: process.terminationStatus, stdout: text[0], stderr: text[1]),
                      signalled: process.terminationReason == .uncaughtSignal && !timedOut, timedOut: timedOut)
}

extension SplitMix64 {
    /// A number in `0..<bound` (0 when `bound` is not positive), for tests that pick at random.
    mutating func below(_ bound: Int) -> Int { Int(next() % UInt64(max(bound, 1))) }
}

/// A store at `directory/name` holding `checkpointed` keys in its data file (loaded, then
/// closed) and `logged` more committed in batches of ten by a shell that is still running
/// when the store's files are copied to `directory/image`: the copy is what a crash of
/// that shell would leave. Returns every key's value as the dump prints it.
func storeWithKeysInDataAndLog(in directory: URL, checkpointed: Int, logged: Int) throws -> [String: String] {
    var expected: [String: String] = [:]
    var lines = ""
    for index in 0..<checkpointed {
        let (key, value) = ("data-\(index)", "value-\(index)-" + String(repeating: "d", count: index % 40))
        expected[key] = value
        lines += "{\"key\":\"\(key)\",\"value\":\"\(value)\"}\n"
    }
    let load = try runStrata(["load", "--store", "live.db"], input: lines, in: directory)
    guard load.status == 0 else { throw ToolTestError.failed("load: \(load.stderr)") }
    let shell = Process()
    shell.executableURL = strataExecutable
    shell.arguments = ["shell", "live.db"]
    shell.currentDirectoryURL = directory
    let input = Pipe(), output = Pipe()
    shell.standardInput = input
    shell.standardOutput = output
    try shell.run()
    var commits = 0
    var script = ""
    for index in 0..<logged {
        let (key, value) = ("log-\(index)", "logged-\(index)")
        expected[key] = value
        script += "put \(key) \(value)\n"
        if index % 10 == 9 || index == logged - 1 { script += "commit\n"; commits += 1 }
    }
    input.fileHandleForWriting.write(Data(script.utf8))
    var answered = ""
    while answered.components(separatedBy: "committed version").count - 1 < commits {
        let chunk = output.fileHandleForReading.availableData
        guard !chunk.isEmpty else { break }
        answered += String(decoding: chunk, as: UTF8.self)
    }
    try FileManager.default.copyItem(at: directory.appendingPathComponent("live.db"), to: directory.appendingPathComponent("image"))
    try input.fileHandleForWriting.close()
    shell.waitUntilExit()
    return expected
}

enum ToolTestError: Error { case failed(String) }

/// The pairs of `dump --json` output (text keys and values only, as the tests write them).
func dumpedPairs(_ stdout: String) -> [String: String]? {
    var pairs: [String: String] = [:]
    for line in stdout.split(separator: "\n") {
        guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: String],
              let key = object["key"], let value = object["value"] else { return nil }
        pairs[key] = value
    }
    return pairs
}
