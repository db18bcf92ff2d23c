// The simulated SoC's main (sim/soc_sim.py builds it with Verilator around mlo_hw.soc.write_sim's mlo_soc.v):
// clocks the SoC and moves the UART bridge's bytes (the serial_sink/serial_source byte streams of LiteX's
// RS232PHYModel, one byte a cycle) between the SoC and a pseudo-terminal, which litex_server --uart opens as
// it opens a board's serial port. Prints "pty <path>" on stdout once the pty is ready; on SIGTERM/SIGINT (or
// when stdin closes, if started with --stdin-quit) prints "cycles <n> seconds <s>" and exits.
#include "Vmlo_soc.h"
#include "verilated.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fcntl.h>
#include <termios.h>
#include <unistd.h>

static volatile std::sig_atomic_t quit = 0;
static void on_signal(int) { quit = 1; }

int main(int argc, char** argv) {
    Verilated::commandArgs(argc, argv);
    int master = posix_openpt(O_RDWR | O_NOCTTY);
    if (master < 0 || grantpt(master) != 0 || unlockpt(master) != 0) { perror("pty"); return 2; }
    const char* name = ptsname(master);
    // keep the slave open ourselves: the master then never reads EIO while no client has it open
    int slave = open(name, O_RDWR | O_NOCTTY);
    if (slave < 0) { perror("pty slave"); return 2; }
    struct termios t;
    tcgetattr(slave, &t);
    cfmakeraw(&t);
    tcsetattr(slave, TCSANOW, &t);
    fcntl(master, F_SETFL, fcntl(master, F_GETFL) | O_NONBLOCK);
    std::signal(SIGTERM, on_signal);
    std::signal(SIGINT, on_signal);
    std::printf("pty %s\n", name);
    std::fflush(stdout);

    Vmlo_soc* top = new Vmlo_soc;
    top->sys_rst = 1;
    top->serial_sink_valid = 0;
    top->serial_source_ready = 1;
    top->sim_trace = 0;
    std::deque<unsigned char> rx, tx;   // rx: host -> SoC, tx: SoC -> host
    unsigned char buf[4096];
    unsigned long long cycles = 0;
    auto t0 = std::chrono::steady_clock::now();
    while (!quit) {
        top->sys_clk = 0;
        top->eval();
        if (cycles == 16) top->sys_rst = 0;
        // the pty, every 64 cycles, or at once when the SoC has nothing to take
        if ((cycles & 63) == 0 || (rx.empty() && !tx.empty())) {
            if (!tx.empty()) {
                size_t n = 0;
                for (auto it = tx.begin(); it != tx.end() && n < sizeof buf; ++it) buf[n++] = *it;
                ssize_t w = write(master, buf, n);
                if (w > 0) tx.erase(tx.begin(), tx.begin() + w);
            }
            if (rx.size() < 65536) {
                ssize_t r = read(master, buf, sizeof buf);
                for (ssize_t i = 0; i < r; i++) rx.push_back(buf[i]);
            }
        }
        top->serial_sink_valid = !rx.empty();
        top->serial_sink_data = rx.empty() ? 0 : rx.front();
        top->eval();
        bool took = top->serial_sink_valid && top->serial_sink_ready;
        bool gave = top->serial_source_valid && top->serial_source_ready;
        unsigned char out = top->serial_source_data;
        top->sys_clk = 1;
        top->eval();
        if (took) rx.pop_front();
        if (gave) tx.push_back(out);
        cycles++;
    }
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("cycles %llu seconds %.3f\n", cycles, s);
    std::fflush(stdout);
    top->final();
    delete top;
    close(slave);
    close(master);
    return 0;
}
