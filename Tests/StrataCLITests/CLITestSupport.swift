// Runs the `strata` tool as a process, the way users and scripts do.
import Foundation

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
