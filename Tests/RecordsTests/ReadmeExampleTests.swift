import Foundation
import Strata
import Synchronization
import Testing

// README.md's records example, run as written: the text between the markers in
// `runExample` is the README's first Swift block without its `import Strata` line (a test
// compares the two), compiled here against the real API. Two names are bound for the test
// around it: `Store.open(path:)` opens the store inside a temporary directory, and `print`
// records what the example prints.

/// Where the example's store opens, and the store it opened.
enum ReadmeScope {
    @TaskLocal static var directory = ""
    static let opened = Mutex<Strata.Store?>(nil)
}

/// What the example printed, line by line.
final class ReadmePrinted: Sendable {
    private let lines = Mutex<[String]>([])
    func append(_ line: String) { lines.withLock { $0.append(line) } }
    var all: [String] { lines.withLock { $0 } }
}

/// The README's `Todo`, declared where a test outside the example can name it.
struct ReadmeTodo: Record {
    var id: Int
    var title: String
    var done = false
    static var indexes: [RecordIndex<ReadmeTodo>] { [.index(\ReadmeTodo.title)] }
}

@Suite struct ReadmeExampleTests {
    static let readme = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("README.md")

    /// The example's lines as README.md shows them, after `import Strata`.
    static func readmeExample() throws -> [String] {
        var block = try readmeBlock()
        try #require(block.first == "import Strata", "the README's example starts with import Strata")
        block.removeFirst()
        while block.first == "" { block.removeFirst() }
        return block
    }

    /// The lines of README.md's first Swift block after the line `heading` (after the
    /// start when nil).
    static func readmeBlock(after heading: String? = nil) throws -> [String] {
        let lines = try String(contentsOf: readme, encoding: .utf8).components(separatedBy: "\n")
        let from = try heading.map { heading in try #require(lines.firstIndex(of: heading), "README.md has no \(heading)") } ?? 0
        let start = try #require(lines[from...].firstIndex(of: "```swift"), "README.md has no Swift block")
        let end = try #require(lines[(start + 1)...].firstIndex(of: "```"))
        return Array(lines[(start + 1)..<end])
    }

    /// The lines between the markers `README.md's <name> begins` and `… ends` in `file`,
    /// without their indentation.
    static func exampleHere(_ name: String = "example", in file: String = #filePath) throws -> [String] {
        let lines = try String(contentsOf: URL(fileURLWithPath: file), encoding: .utf8).components(separatedBy: "\n")
        let start = try #require(lines.firstIndex { $0.hasSuffix("// README.md's \(name) begins") })
        let end = try #require(lines.firstIndex { $0.hasSuffix("// README.md's \(name) ends") })
        let indent = String(repeating: " ", count: 8)
        return lines[(start + 1)..<end].map { $0.hasPrefix(indent) ? String($0.dropFirst(indent.count)) : $0 }
    }

    @Test func theExampleHereIsTheReadmesAsWritten() throws {
        let readme = try Self.readmeExample(), here = try Self.exampleHere()
        #expect(readme.count > 10, "README.md's example: \(readme.count) lines")
        #expect(readme == here, "README.md's example and the one this test runs differ")
    }

    @Test func theReadmeExampleRunsAndPrintsWhatItSays() async throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("strata-readme-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let printed = ReadmePrinted()
        let example = Task {
            try await ReadmeScope.$directory.withValue(directory.path) { try await Self.runExample(printed) }
        }
        // The observation prints its first value, then waits for commits: close the store
        // (which ends the observation, and with it the example) once it has.
        for _ in 0..<600 where printed.all.count < 2 { try await Task.sleep(for: .milliseconds(50)) }
        try ReadmeScope.opened.withLock { try $0?.close() }
        try await example.value
        #expect(printed.all == [#"["Buy milk", "Call Ann"]"#, "2 to do"])
        #expect(FileManager.default.fileExists(atPath: directory.appendingPathComponent("todos.strata").path))
    }

    /// The example's comment says the query's sort is read from the title index.
    @Test func theExampleQuerysSortIsReadFromTheTitleIndex() throws {
        let store = try Store.inMemory()
        defer { try? store.close() }
        let plan = try store.read { try $0.repository(ReadmeTodo.self).explain(#Predicate<ReadmeTodo> { !$0.done }, sortBy: [SortDescriptor(\ReadmeTodo.title)]) }
        #expect(plan.contains("sorted by reading index title forwards"), "\(plan)")
    }

    static func runExample(_ printed: ReadmePrinted) async throws {
        enum Store {
            static func open(path: String) throws -> Strata.Store {
                let store = try Strata.Store.open(path: ReadmeScope.directory + "/" + path)
                ReadmeScope.opened.withLock { $0 = store }
                return store
            }
        }
        func print(_ value: Any) { printed.append("\(value)") }

        // README.md's example begins
        struct Todo: Record {
            var id: Int
            var title: String
            var done = false
            static var indexes: [RecordIndex<Todo>] { [.index(\Todo.title)] }
        }

        let store = try Store.open(path: "todos.strata")   // a directory, created if missing

        // A unit of work: one durable commit when the body returns, nothing kept if it throws.
        try await store.write { unit in
            let todos = unit.repository(Todo.self)
            try todos.insert(Todo(id: 1, title: "Call Ann"))
            try todos.insert(Todo(id: 2, title: "Buy milk"))
        }

        // A query (the sort is read from the title index), and the same query observed.
        let pending = #Predicate<Todo> { !$0.done }
        let first = try await store.read { try $0.repository(Todo.self).fetch(pending, sortBy: [SortDescriptor(\Todo.title)]) }
        print(first.map(\.title))                          // ["Buy milk", "Call Ann"]
        for try await todos in store.observe({ try $0.repository(Todo.self).count(pending) }) {
            print("\(todos) to do")                        // now, then after each commit that changes it
        }
        // README.md's example ends
    }
}
