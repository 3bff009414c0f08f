// What the `strata` tool promises about damaged stores, stopped copies and full disks,
// checked the way an operator meets them: through the tool, on real files.
import Foundation
import StrataFileIO
import Testing

@Suite(.serialized) struct ToolTrustTests {
    /// 300 random damages (bit flips, zeroed runs, truncations, extensions) of a store's
    /// files, with keys both in the data file and only in the log: no command is killed by
    /// a signal or hangs, no value read is wrong, and a key is missing only when `verify`
    /// does not say ok.
    @Test func randomDamageNeverGivesAWrongValueOrASilentlyMissingKey() throws {
        let seed: UInt64 = 2026_1123
        print("seed \(seed)")
        var random = SplitMix64(seed: seed)
        let directory = try scratchDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let expected = try storeWithKeysInDataAndLog(in: directory, checkpointed: 300, logged: 60)
        let image = directory.appendingPathComponent("image")
        let files = try ["data", "LOCK"].map { image.appendingPathComponent($0) }
            + FileManager.default.contentsOfDirectory(atPath: image.appendingPathComponent("wal").path)
                .filter { $0.hasSuffix(".seg") }.map { image.appendingPathComponent("wal/\($0)") }
        var outcomes: [String: Int] = [:]
        for trial in 0..<300 {
            let store = directory.appendingPathComponent("case")
            try? FileManager.default.removeItem(at: store)
            try FileManager.default.copyItem(at: image, to: store)
            let file = files[random.below(files.count)]
            let target = store.appendingPathComponent(String(file.path.dropFirst(image.path.count + 1)))
            var bytes = [UInt8](try Data(contentsOf: target))
            // Half the offsets fall in the first 8 KiB, where the meta pages and the log's frames are.
            let span = random.below(2) == 0 ? min(bytes.count, 8192) : bytes.count
            let offset = random.below(span)
            let damage: String
            switch random.below(4) {
            case 0 where !bytes.isEmpty:
                bytes[offset] ^= UInt8(1 << random.below(8))
                damage = "bit flip at \(offset)"
            case 1 where !bytes.isEmpty:
                let count = min(1 + random.below(4096), bytes.count - offset)
                bytes.replaceSubrange(offset..<(offset + count), with: repeatElement(0, count: count))
                damage = "\(count) zeros at \(offset)"
            case 2:
                bytes.removeSubrange(offset...)
                damage = "cut to \(offset) bytes"
            default:
                bytes += (0..<(1 + random.below(8192))).map { _ in UInt8(truncatingIfNeeded: random.next()) }
                damage = "extended to \(bytes.count) bytes"
            }
            try Data(bytes).write(to: target)
            let what = "trial \(trial): \(damage) of \(target.lastPathComponent)"

            let verify = try runStrata(["verify", "case"], in: directory, limit: 60)
            let dump = try runStrata(["dump", "--json", "case"], in: directory, limit: 60)
            for (name, result) in [("verify", verify), ("dump", dump)] {
                #expect(!result.signalled && !result.timedOut, "\(what): \(name) crashed or hung: \(result.run.stderr)")
                #expect([0, 1, 2].contains(result.run.status), "\(what): \(name) exited \(result.run.status)")
                if result.run.status == 2 { #expect(!result.run.stderr.isEmpty, "\(what): \(name) failed without a message") }
            }
            if dump.run.status == 0 {
                let pairs = try #require(dumpedPairs(dump.run.stdout), "\(what): dump printed lines it cannot read back")
                for (key, value) in pairs {
                    #expect(expected[key] == value, "\(what): \(key) reads \(value), not \(expected[key] ?? "nothing")")
                }
                if verify.run.status == 0 {
                    #expect(pairs.count == expected.count, "\(what): verify said ok but \(expected.count - pairs.count) keys are missing")
                }
            }
            if verify.run.status == 0 { #expect(dump.run.status == 0, "\(what): verify said ok but dump failed") }
            outcomes["verify \(verify.run.status), dump \(dump.run.status)", default: 0] += 1
        }
        print("300 damages: \(outcomes.sorted { $0.key < $1.key }.map { "\($0.key): \($0.value)" }.joined(separator: "; "))")
    }

    /// Twelve backups killed at random moments: each copy is whole (the same dump as its
    /// source) or refused by every command with a message, never a store with keys missing.
    @Test func aBackupKilledAtAnyMomentIsWholeOrClearlyUnusable() throws {
        let seed: UInt64 = 12
        print("seed \(seed)")
        var random = SplitMix64(seed: seed)
        let directory = try scratchDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        var lines = ""
        for index in 0..<60_000 { lines += "{\"key\":\"key-\(index)\",\"value\":\"\(String(repeating: "v", count: 200))\"}\n" }
        #expect(try runStrata(["load", "--store", "source.db"], input: lines, in: directory).status == 0)
        let source = try runStrata(["dump", "--json", "source.db"], in: directory, limit: 120)
        #expect(source.run.status == 0)
        // How long a whole backup takes, to kill inside it.
        let started = Date()
        #expect(try runStrata(["backup", "full.db", "--store", "source.db"], in: directory, limit: 120).run.status == 0)
        let duration = Date().timeIntervalSince(started)
        var whole = 0, refused = 0
        for attempt in 0..<12 {
            let name = "copy-\(attempt).db"
            let process = Process()
            process.executableURL = strataExecutable
            process.arguments = ["backup", name, "--store", "source.db"]
            process.currentDirectoryURL = directory
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            usleep(useconds_t(Double(random.below(1000)) / 1000 * duration * 1_000_000))
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            let dump = try runStrata(["dump", "--json", name], in: directory, limit: 120)
            let verify = try runStrata(["verify", name], in: directory, limit: 120)
            if dump.run.status == 0 {
                #expect(dump.run.stdout == source.run.stdout, "attempt \(attempt): a killed backup opened with other contents")
                #expect(verify.run.status == 0)
                whole += 1
            } else {
                #expect(dump.run.status == 2 && verify.run.status == 2, "attempt \(attempt): \(dump.run.stderr)")
                #expect(dump.run.stderr.contains("did not finish") || dump.run.stderr.contains("no store")
                            || dump.run.stderr.contains("There is no store"), "attempt \(attempt): \(dump.run.stderr)")
                refused += 1
            }
        }
        print("12 killed backups (a whole one takes \(Int(duration * 1000)) ms): \(whole) whole, \(refused) refused")
    }

    /// Removing the data file makes every command fail, naming it, and creates nothing.
    @Test func aStoreWithoutItsDataFileIsRefused() throws {
        let directory = try scratchDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        _ = try storeWithKeysInDataAndLog(in: directory, checkpointed: 10, logged: 20)
        try FileManager.default.removeItem(at: directory.appendingPathComponent("image/data"))
        for command in [["get", "--store", "image", "log-1"], ["put", "--store", "image", "k", "v"], ["verify", "image"]] {
            let run = try runStrata(command, in: directory)
            #expect(run.status == 2 && run.stderr.contains("data file is missing"), "\(command): \(run.stderr)")
        }
        #expect(!FileManager.default.fileExists(atPath: directory.appendingPathComponent("image/data").path))
    }

    /// `verify` checks record index entries without knowing the types: an entry that names
    /// a record that does not exist makes it exit 1 and say so.
    @Test func verifyReportsAnIndexEntryThatNamesNoRecord() throws {
        let directory = try scratchDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let entity = Array("Gadget".utf8), index = Array("serial".utf8)
        let key = [0xFE, UInt8(ascii: "i"), UInt8(entity.count)] + entity + [UInt8(index.count)] + index + [0x61, 0, 0]
        let hex = { (bytes: [UInt8]) in "0x" + bytes.map { String(format: "%02x", $0) }.joined() }
        let line = "{\"key\":\"\(hex(key))\",\"value\":\"\(hex([0x80, 0, 0, 0, 0, 0, 0, 7]))\",\"encoding\":\"hex\"}\n"
        #expect(try runStrata(["load", "--store", "s.db"], input: "{\"key\":\"plain\",\"value\":\"1\"}\n", in: directory).status == 0)
        #expect(try runStrata(["verify", "s.db"], in: directory).status == 0)
        #expect(try runStrata(["load", "--store", "s.db"], input: line, in: directory).status == 0)
        let verify = try runStrata(["verify", "s.db"], in: directory)
        #expect(verify.status == 1 && verify.stderr.contains("names a record that does not exist"), "\(verify.stderr)")
    }

    /// Damage in the middle of the log stops the store from opening with a message that
    /// names `strata salvage`; salvage writes what the log still holds into a new store and
    /// lists the damage, leaving the damaged store as it was.
    @Test func salvageRecoversAroundDamageInTheMiddleOfTheLog() throws {
        let directory = try scratchDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let expected = try storeWithKeysInDataAndLog(in: directory, checkpointed: 10, logged: 30)
        let wal = directory.appendingPathComponent("image/wal")
        let segment = try #require(try FileManager.default.contentsOfDirectory(atPath: wal.path).first { $0.hasSuffix(".seg") })
        let url = wal.appendingPathComponent(segment)
        var bytes = [UInt8](try Data(contentsOf: url))
        bytes[64 + 40 + 3] ^= 0x01 // the first frame's payload: the first of three commits
        try Data(bytes).write(to: url)

        let get = try runStrata(["get", "--store", "image", "log-25"], in: directory)
        #expect(get.status == 2 && get.stderr.contains("strata salvage"), "\(get.stderr)")
        let salvage = try runStrata(["salvage", "--mode", "skip-corrupted", "--store", "image", "saved.db"], in: directory)
        #expect(salvage.status == 0, "\(salvage.stderr)")
        #expect(salvage.lines.contains { $0.hasPrefix("damage: corruption at offset 64 of") }, "\(salvage.stdout)")
        let dump = try runStrata(["dump", "--json", "saved.db"], in: directory)
        let pairs = try #require(dumpedPairs(dump.stdout))
        let lost = Set(expected.keys).subtracting(pairs.keys)
        #expect(lost == Set((0..<10).map { "log-\($0)" }), "exactly the damaged commit's keys are gone")
        for (key, value) in pairs { #expect(expected[key] == value) }
        #expect(try Data(contentsOf: url) == Data(bytes), "the damaged store is left as it was")
        #expect(try runStrata(["salvage", "--mode", "skip-corrupted", "--store", "image"], in: directory).status == 64)
    }

    /// On a full disk (a 2 MiB tmpfs): a `put` that prints "committed" exits 0 (a failed
    /// checkpoint at close is a warning), one that fails prints no "committed" and exits 2;
    /// a shell script's failed commits each report their cause once; once the disk has room
    /// again, every acknowledged put is there and the store verifies. (Failed before: a put
    /// printed "committed version N" and exited 2; the shell then printed "already
    /// discarded" for every later command.)
    @Test(.enabled(if: SmallDisk.available, "needs root to mount a tmpfs"))
    func onAFullDiskNothingAcknowledgedIsLostAndExitStatusesTellTheTruth() throws {
        let directory = try scratchDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let disk = try SmallDisk(at: directory.appendingPathComponent("disk"), megabytes: 2)
        defer { disk.unmount() }
        let value = String(repeating: "x", count: 8_000)
        var acknowledged: [Int] = []
        var failures = 0
        var index = 0
        while failures < 5 && index < 1_000 {
            let put = try runStrata(["put", "--store", "disk/s.db", "key-\(index)", "\(value)\(index)"], in: directory, limit: 60)
            #expect(!put.signalled && !put.timedOut)
            if put.run.stdout.contains("committed version") {
                #expect(put.run.status == 0, "put \(index) said committed but exited \(put.run.status): \(put.run.stderr)")
                acknowledged.append(index)
            } else {
                #expect(put.run.status == 2 && !put.run.stderr.isEmpty, "put \(index): \(put.run.status) \(put.run.stderr)")
                failures += 1
            }
            index += 1
        }
        #expect(failures == 5 && acknowledged.count >= 50, "the disk filled after \(acknowledged.count) puts")
        let script = (0..<20).map { "put script-\($0) \(value)\ncommit\n" }.joined()
        let shell = try runStrata(["shell", "disk/s.db"], input: script, in: directory)
        #expect(shell.status == 2)
        #expect(!shell.stderr.contains("already"), "\(shell.stderr)")
        let committed = shell.stdout.components(separatedBy: "committed version").count - 1
        let failed = shell.stderr.components(separatedBy: "staged change(s) were dropped").count - 1
        #expect(committed + failed == 20, "each commit is reported once: \(committed) committed, \(failed) failed")

        try disk.grow(megabytes: 64)
        let verify = try runStrata(["verify", "disk/s.db"], in: directory)
        #expect(verify.status == 0, "\(verify.stderr)")
        let dump = try runStrata(["dump", "--json", "disk/s.db"], in: directory)
        let pairs = try #require(dumpedPairs(dump.stdout))
        for index in acknowledged { #expect(pairs["key-\(index)"] == "\(value)\(index)", "acknowledged put \(index) is lost") }
        print("full disk: \(acknowledged.count) puts acknowledged, \(failures) refused; the script: \(committed) committed, \(failed) failed")
    }
}

/// A tmpfs of a few megabytes mounted for one test (needs root).
struct SmallDisk {
    let url: URL

    /// Whether this process may mount one (checked once, by mounting and unmounting).
    static let available: Bool = {
        let probe = FileManager.default.temporaryDirectory.appendingPathComponent("strata-mount-\(UUID().uuidString)")
        guard let disk = try? SmallDisk(at: probe, megabytes: 1) else { return false }
        disk.unmount()
        try? FileManager.default.removeItem(at: probe)
        return true
    }()

    init(at url: URL, megabytes: Int) throws {
        self.url = url
        try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
        guard Self.mount(["-t", "tmpfs", "-o", "size=\(megabytes)m", "tmpfs", url.path]) else {
            throw ToolTestError.failed("mount failed")
        }
    }

    /// Gives the mounted file system more room, keeping its files.
    func grow(megabytes: Int) throws {
        guard Self.mount(["-o", "remount,size=\(megabytes)m", url.path]) else { throw ToolTestError.failed("remount failed") }
    }

    func unmount() {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/umount")
        process.arguments = [url.path]
        try? process.run()
        process.waitUntilExit()
    }

    private static func mount(_ arguments: [String]) -> Bool {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/bin/mount")
        process.arguments = arguments
        process.standardError = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return false }
        process.waitUntilExit()
        return process.terminationStatus == 0
    }
}
