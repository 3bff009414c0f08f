// libFuzzer's entry point for the `WALFrames` target; its body and its promises are
// `FuzzTargets.walFrames` in StrataTesting (Fuzz/README.md).
import StrataTesting

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    FuzzTargets.walFrames(Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
}
