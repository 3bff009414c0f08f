import Foundation
import Testing

/// What scripts rely on: read commands that never touch the store, `dump --json` and
/// `load` as a round trip, exit statuses, and staged changes never dropped silently.
@Suite struct ToolContractTests {
    /// Each file of the store by relative path: its size, mtime and a hash of its bytes;
    /// not the reader table, the one file a read-only open writes (its slot).
    private func fingerprint(_ store: URL) throws -> [String: String] {
        var result: [String: String] = [:]
        let enumerator = try #require(FileManager.default.enumerator(atPath: store.path))
        for case let name as String in enumerator where name != "readers" {
            var info = stat()
            #expect(stat(store.appendingPathComponent(name).path, &info) == 0)
            let bytes = FileManager.default.contents(atPath: store.appendingPathComponent(name).path).map(Array.init) ?? []
            result[name] = "\(info.st_size) \(info.st_mtim.tv_sec).\(info.st_mtim.tv_nsec) \(bytes.hashValue)"
        }
        return result
    }

    @Test func readCommandsChangeNoByteAndNoMtimeOfTheStore() throws {
        let directory = try scratchDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let session = (0..<300).map { "put key\($0) value-\($0)" }.joined(separator: "\n") + "\ncommit\ndel key3\ncommit\n"
        #expect(try runStrata(["shell", "s.db"], input: session, in: directory).status == 0)
        let store = directory.appendingPathComponent("s.db")
        let before = try fingerprint(store)
        #expect(before.keys.contains("data") && before.keys.contains("LOCK"), "\(before.keys)")
        let commands = [["get", "key7", "--store", "s.db"], ["get", "key7", "--json", "--store", "s.db"],
                        ["scan", "--store", "s.db"], ["scan", "--json", "--store", "s.db"], ["dump", "s.db"],
                        ["dump", "--json", "s.db"], ["stat", "s.db"], ["stat", "--json", "s.db"], ["verify", "s.db"],
                        ["verify", "--json", "s.db"], ["wal", "s.db"], ["backup", "copy.db", "--store", "s.db"],
                        ["compact", "small.db", "--store", "s.db"]]
        for command in commands {
            let run = try runStrata(command, in: directory)
            #expect(run.status == 0, "\(command): \(run.stderr)")
        }
        #expect(try fingerprint(store) == before)
        let stat = try runStrata(["stat", "--json", "s.db"], in: directory)
        let figures = try JSONSerialization.jsonObject(with: Data(stat.stdout.utf8)) as? [String: Any]
        #expect(figures?["live_keys"] as? Int == 299 && figures?["version"] as? Int == 2, "\(stat.stdout)")
        let verify = try runStrata(["verify", "--json", "s.db"], in: directory)
        let report = try JSONSerialization.jsonObject(with: Data(verify.stdout.utf8)) as? [String: Any]
        #expect(report?["ok"] as? Bool == true && report?["keys"] as? Int == 299, "\(verify.stdout)")
        let get = try runStrata(["get", "key7", "--json", "--store", "s.db"], in: directory)
        #expect(get.lines == [#"{"key":"key7","value":"value-7"}"#])
        // The copies made from the read-only store read back whole.
        for copy in ["copy.db", "small.db"] {
            let scan = try runStrata(["scan", "--store", copy], in: directory)
            #expect(scan.status == 0 && scan.lines.count == 299, "\(copy): \(scan.stderr)")
        }
    }

    @Test func dumpJsonPipedIntoLoadGivesAnIdenticalDump() throws {
        let directory = try scratchDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        // Text, text that looks like hex, binary keys and values, an empty value, and
        // enough keys to take several of load's commits.
        var script = ["put ключ значение", "put 0x00ff 0x0001feff", "put plain 0x00", "put bin-key 0xc0", "put blank 0x"]
        script += (0..<3000).map { "put bulk\($0) " + String(repeating: "x", count: 500) }
        #expect(try runStrata(["shell", "s.db"], input: script.joined(separator: "\n") + "\ncommit\n", in: directory).status == 0)
        // The shell reads 0x… as hex; a key that is the text "0x41" comes in through load.
        let textLikeHex = #"{"key":"0x41","value":"text that starts like hex"}"#
        #expect(try runStrata(["load", "--store", "s.db"], input: textLikeHex + "\n", in: directory).status == 0)
        let dump = try runStrata(["dump", "--json", "s.db"], in: directory)
        #expect(dump.status == 0 && dump.lines.count == 3006)
        #expect(dump.lines.contains(textLikeHex), "\(dump.lines.prefix(3))")
        #expect(dump.lines.contains(#"{"encoding":"hex","key":"0x00ff","value":"0x0001feff"}"#))
        #expect(dump.lines.contains(#"{"encoding":"hex","key":"0x706c61696e","value":"0x00"}"#))
        let dumpFile = directory.appendingPathComponent("dump.jsonl")
        try dump.stdout.write(to: dumpFile, atomically: true, encoding: .utf8)

        let fromFile = try runStrata(["load", "dump.jsonl", "--store", "fromfile.db"], in: directory)
        #expect(fromFile.status == 0 && fromFile.lines == ["loaded 3006 key(s) into fromfile.db, version 2"],
                "\(fromFile.lines) \(fromFile.stderr)")
        let fromStdin = try runStrata(["load", "--store", "fromstdin.db"], input: dump.stdout, in: directory)
        #expect(fromStdin.status == 0, "\(fromStdin.stderr)")
        for copy in ["fromfile.db", "fromstdin.db"] {
            let copied = try runStrata(["dump", "--json", copy], in: directory)
            #expect(copied.stdout == dump.stdout, "\(copy): \(copied.lines.count) lines, \(copied.stderr)")
            let text = try runStrata(["dump", copy], in: directory).stdout
            #expect(try text == runStrata(["dump", "s.db"], in: directory).stdout, "\(copy): the text dumps differ")
        }
    }

    @Test func loadStopsAtALineItCannotReadAndNamesIt() throws {
        let directory = try scratchDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let input = #"{"key":"a","value":"1"}"# + "\n\n" + #"{"key":"b","value":"2","encoding":"hex"}"# + "\n"
        let run = try runStrata(["load", "--store", "s.db"], input: input, in: directory)
        #expect(run.status == 2)
        #expect(run.stderr.contains("line 3 of standard input") && run.stderr.contains("hex"), "\(run.stderr)")
        let notJSON = try runStrata(["load", "--store", "t.db"], input: "key = value\n", in: directory)
        #expect(notJSON.status == 2 && notJSON.stderr.contains("line 1") && notJSON.stderr.contains("nothing was loaded"))
        let missing = try runStrata(["load", "nowhere.jsonl", "--store", "u.db"], in: directory)
        #expect(missing.status == 2 && missing.stderr.contains("cannot read nowhere.jsonl"), "\(missing.stderr)")
    }

    @Test func aScriptThatLeavesChangesUncommittedFailsAndSaysSo() throws {
        let directory = try scratchDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let run = try runStrata(["shell", "s.db"], input: "put a 1\ncommit\nput b 2\nchild\nput c 3\n", in: directory)
        #expect(run.status == 2)
        #expect(run.stderr.contains("2 staged change(s) it never committed") && run.stderr.contains("commit"), "\(run.stderr)")
        #expect(try runStrata(["get", "a", "--store", "s.db"], in: directory).status == 0)
        let dropped = try runStrata(["get", "b", "--store", "s.db"], in: directory)
        #expect(dropped.status == 1 && dropped.stderr.contains("b has no value"))
        // `quit` with staged changes is the same.
        let quit = try runStrata(["shell", "s.db"], input: "put d 4\nquit\n", in: directory)
        #expect(quit.status == 2 && quit.stderr.contains("1 staged change(s)"))
        // A script that commits everything exits 0 with nothing on stderr.
        let clean = try runStrata(["shell", "s.db"], input: "put e 5\ncommit\nquit\n", in: directory)
        #expect(clean.status == 0 && clean.stderr.isEmpty, "\(clean.stderr)")
    }

    /// On a terminal the shell edits lines and keeps a history across sessions (libedit),
    /// and leaving with staged changes asks whether to commit them.
    @Test func onATerminalLinesAreEditedRecalledAndStagedChangesAsked() throws {
        let directory = try scratchDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let first = try runStrataOnATerminal(["shell", "s.db"], input: "put k v\nput j w\nquit\ny\n", in: directory)
        #expect(first.status == 0, "\(first.stdout)")
        #expect(first.stdout.contains("2 change(s) are staged but not committed. Commit them before leaving? [y/N]"))
        #expect(first.stdout.contains("committed version 1: 2 change(s)"), "\(first.stdout)")
        let history = try String(contentsOf: directory.appendingPathComponent(".strata_history"), encoding: .utf8)
        #expect(history.contains("put\\040k\\040v") && !history.contains("\ny\n"), "\(history)")

        // Up recalls `get j` (so `w` is printed twice); "et k", Ctrl-A, "g" is the edited line
        // `get k`; the staged `del k` is dropped when the answer is n.
        let up = "\u{1b}[A"
        let second = try runStrataOnATerminal(["shell", "s.db"], input: "get j\n" + up + "\n" + "et k\u{01}g\n" + "del k\nquit\nn\n",
                                              in: directory)
        let answers = second.stdout.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }
        #expect(answers.filter { $0 == "w" }.count == 2, "\(second.stdout)")
        #expect(answers.contains("v"), "\(second.stdout)")
        #expect(second.stdout.contains("dropped 1 uncommitted change(s)"), "\(second.stdout)")
        #expect(try runStrata(["get", "k", "--store", "s.db"], in: directory).lines == ["v"])
    }

    @Test func versionAndExitStatusesAreDocumented() throws {
        let directory = try scratchDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let version = try runStrata(["--version"], in: directory)
        #expect(version.status == 0 && version.lines.count == 1)
        #expect(version.stdout.hasPrefix("strata ") && version.stdout.contains("data file format 7, log format 2"), "\(version.stdout)")
        let help = try runStrata(["--help"], in: directory)
        #expect(help.stdout.contains("Exit status: 0 success; 1 the answer is no"), "\(help.stdout)")
        // 64: a usage error (a command without its argument); 1: the answer is no; 2: an error.
        let usage = try runStrata(["get", "--store", "s.db"], in: directory)
        #expect(usage.status == 64 && usage.stderr.contains("Missing expected argument"), "\(usage.stderr)")
        #expect(try runStrata(["put", "--store", "s.db", "k", "v"], in: directory).status == 0)
        #expect(try runStrata(["get", "--store", "s.db", "other"], in: directory).status == 1)
        #expect(try runStrata(["get", "--store", "nowhere.db", "k"], in: directory).status == 2)
        try Data([1, 2, 3]).write(to: directory.appendingPathComponent("s.db/data"))
        #expect(try runStrata(["get", "--store", "s.db", "k"], in: directory).status == 2)
    }
}
