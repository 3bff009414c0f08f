// Where the shell's lines come from: on a terminal, libedit's readline (line editing, and a
// history kept across sessions in ~/.strata_history); otherwise plain lines from stdin.
import CStrataEditLine
import Foundation

struct LineInput {
    /// Whether lines come from a terminal (edited, with history).
    let interactive: Bool
    /// Where the history is kept between sessions (nil without a home directory).
    let historyPath: String?

    /// Lines kept in the history file.
    static let historyLimit: Int32 = 1000

    init(interactive: Bool, environment: [String: String] = ProcessInfo.processInfo.environment) {
        self.interactive = interactive
        historyPath = environment["HOME"].flatMap { $0.isEmpty ? nil : $0 + "/.strata_history" }
        guard interactive else { return }
        using_history()
        stifle_history(Self.historyLimit)
        // A missing history file is a first session, not an error.
        if let historyPath { _ = read_history(historyPath) }
    }

    /// The next line without its newline, or nil at the end of input. On a terminal,
    /// shows `prompt` and adds a non-blank line to the history when `remember`.
    func next(prompt: String, remember: Bool = true) -> String? {
        guard interactive else { return readLine() }
        guard let line = readline(prompt) else { return nil }
        defer { free(line) }
        if remember && !String(cString: line).allSatisfy(\.isWhitespace) { _ = add_history(line) }
        return String(cString: line)
    }

    /// Writes the history back (on a terminal). A history that cannot be written is
    /// not worth failing a session for: the session's work is already committed or dropped.
    func saveHistory() {
        guard interactive, let historyPath else { return }
        _ = write_history(historyPath)
    }
}
