// `strata shell [PATH]`: the interactive prompt (the default subcommand).
import ArgumentParser
import Strata
import Foundation

struct ShellCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "shell",
        abstract: "An interactive prompt over a store (created if missing); reads a script from stdin when it is not a terminal.",
        discussion: """
            A script's exit status is 2 when one of its commands failed or when it ends with changes staged \
            and never committed (they are dropped, with a message on stderr); on a terminal, leaving with \
            staged changes asks whether to commit them.
            """)

    @Argument(help: "The store's directory.")
    var path = StorePath.defaultPath

    func run() throws {
        let interactive = isTerminal(STDIN_FILENO)
        let store = try reportingErrors { try Store.open(path: path) }
        let shell = Shell(store: store, interactive: interactive)
        let input = LineInput(interactive: interactive)
        defer { input.saveHistory() }
        if interactive {
            print("Strata shell on \(path) (version \(store.version)). Type help for commands, quit to leave.")
            fflush(nil)
        }
        while !shell.finished {
            guard let line = input.next(prompt: shell.prompt) else { break }
            shell.execute(line)
            // Each answer goes out at once, so a program driving the shell through pipes
            // can wait for it.
            fflush(nil)
        }
        let pending = shell.pendingChangeCount
        let dropped = shell.finish(committing: pending > 0 && interactive && confirmCommit(pending, input: input))
        if dropped > 0 {
            if interactive {
                print("dropped \(dropped) uncommitted change(s)")
            } else {
                printError("the script ended with \(dropped) staged change(s) it never committed; they were dropped "
                           + "(end the script with `commit`)")
            }
        }
        try reportingErrors { try store.close() }
        if (shell.failed || dropped > 0) && !interactive { throw ExitStatus.error }
    }

    /// Asks on the terminal whether to commit `pending` staged changes before leaving.
    private func confirmCommit(_ pending: Int, input: LineInput) -> Bool {
        let question = "\(pending) change(s) are staged but not committed. Commit them before leaving? [y/N] "
        let answer = input.next(prompt: question, remember: false)?.trimmingCharacters(in: .whitespaces).lowercased() ?? ""
        return answer == "y" || answer == "yes"
    }
}
