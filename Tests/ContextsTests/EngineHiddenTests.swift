// An application that imports only `Strata` cannot reach the storage engine beneath its
// store: not `Store.engine`, not the engine's types, not a blind batch commit. The compiler
// says so: a probe source is type-checked against the modules this test run was built with,
// in the compiler's own `-verify` mode, which fails on an expected error that does not come
// and on an error that was not expected (so the probe's allowed lines must compile too).
import Foundation
import Testing

@Suite struct EngineHiddenTests {
    /// What an application writes: the store's own maintenance calls compile; every path to
    /// the engine is an error. `expected-error` comments are the compiler verifier's syntax.
    static let probe = """
        import Strata

        func maintain(_ store: Store) throws {
            try store.checkpoint()
            _ = try store.status()
            _ = store.verify().isValid
            _ = store.oldestLoggedVersion
            _ = store.logStatistics.syncCount
        }

        func bypass(_ store: Store) throws {
            _ = store.engine // expected-error {{'engine' is inaccessible due to 'package' protection level}}
            _ = store.storageEngine // expected-error {{value of type 'Store' has no member 'storageEngine'}}
            _ = WALBatch() // expected-error {{cannot find 'WALBatch' in scope}}
            _ = try StorageEngine.open(path: "/tmp/x") // expected-error {{cannot find 'StorageEngine' in scope}}
            let _: Snapshot? = nil // expected-error {{cannot find type 'Snapshot' in scope}}
        }
        """

    @Test func anAppImportingStrataCannotReachTheEngine() throws {
        let modules = try Self.buildDirectory().appendingPathComponent("Modules")
        #expect(FileManager.default.fileExists(atPath: modules.appendingPathComponent("Strata.swiftmodule").path),
                "the Strata module was built beside this test binary")
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("strata-probe-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let source = directory.appendingPathComponent("App.swift")
        try Self.probe.write(to: source, atomically: true, encoding: .utf8)
        var arguments = ["swiftc", "-typecheck", "-swift-version", "6", "-I", modules.path,
                         "-Xfrontend", "-verify", "-Xfrontend", "-verify-ignore-unrelated"]
        for map in try Self.moduleMaps() { arguments += ["-Xcc", "-fmodule-map-file=" + map] }
        arguments.append(source.path)
        let (status, output) = try Self.run(arguments)
        #expect(status == 0, "the compiler's verifier found a difference:\n\(output)")
    }

    /// The directory this test binary was built into (`.build/<triple>/debug`).
    static func buildDirectory() throws -> URL {
        guard let executable = Bundle.main.executableURL else { throw ProbeError("no executable URL for the test binary") }
        var directory = executable.resolvingSymlinksInPath().deletingLastPathComponent()
        // On Linux the binary is `StrataPackageTests.xctest` itself; on macOS it sits inside the bundle.
        while !FileManager.default.fileExists(atPath: directory.appendingPathComponent("Modules").path) {
            let parent = directory.deletingLastPathComponent()
            guard parent.path != directory.path else { throw ProbeError("no Modules directory above \(executable.path)") }
            directory = parent
        }
        return directory
    }

    /// The C modules' maps the Swift modules were built against: SwiftPM's generated ones in
    /// the build directory, and those kept in sources (this package's and its dependencies').
    static func moduleMaps() throws -> [String] {
        let build = try buildDirectory()
        let files = FileManager.default
        // SwiftPM's generated maps: one per C target, at `<target>.build/module.modulemap`.
        var maps = try files.contentsOfDirectory(atPath: build.path)
            .filter { $0.hasSuffix(".build") && !$0.hasSuffix("-tool.build") }
            .map { build.appendingPathComponent($0).appendingPathComponent("module.modulemap").path }
            .filter { files.fileExists(atPath: $0) }
        // Maps kept in sources: this package's C shims and its dependencies' `include/` maps.
        let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
            .deletingLastPathComponent()
        for root in ["Sources", ".build/checkouts"].map(packageRoot.appendingPathComponent) {
            guard let walker = files.enumerator(at: root, includingPropertiesForKeys: nil) else { continue }
            for case let url as URL in walker where url.lastPathComponent == "module.modulemap" {
                let path = url.path
                if path.contains("/Sources/"), !path.contains("/Tests/") {
                    maps.append(path)
                }
            }
        }
        return maps
    }

    static func run(_ arguments: [String]) throws -> (Int32, String) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        try process.run()
        let output = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: output, as: UTF8.self))
    }
}

struct ProbeError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
