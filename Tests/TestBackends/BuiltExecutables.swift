// The package's own executables that tests start as processes (the bank process, the
// outbox process): built next to the test bundle, in the same build directory.
import Foundation

/// The built executable `name`, next to the running test bundle; `name` alone (looked up
/// on PATH) when it is not there.
public func builtExecutable(_ name: String) -> URL {
    let candidates = [
        Bundle.main.executableURL?.deletingLastPathComponent(),
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent(),
    ]
    for case let directory? in candidates {
        let tool = directory.appendingPathComponent(name)
        if FileManager.default.isExecutableFile(atPath: tool.path) { return tool }
    }
    return URL(fileURLWithPath: name)
}
