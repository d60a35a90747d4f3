"""Simplified Chinese for what mpinb says to learners (see :mod:`mpinb._language`).

A catalog: English template -> Chinese template, with the same ``{fields}``. Terms follow
notebooks/zh/术语表.md."""

from __future__ import annotations

ZH: dict[str, str] = {
    # -- the pool
    "mpinb: traced MPI calls run in Python on {ranks}, since the C tracer could not be built or loaded "
    "({why}). Results are the same; each traced call costs a few microseconds more. `mpinb doctor` checks "
    "the build; MPINB_TRACER=python silences this.":
        "mpinb：{ranks} 上被追踪的 MPI 调用在 Python 中运行，因为 C 追踪器无法构建或加载（{why}）。结果相同，"
        "但每次被追踪的调用会多花几微秒。`mpinb doctor` 会检查构建；设置 MPINB_TRACER=python 可关闭此提示。",
    # -- mpinb.check: verdicts and the grading's own sentences
    "{exercise}: correct, on every rank and in how the ranks communicated.":
        "{exercise}：正确，每个 rank 上的结果和各 rank 之间的通信方式都对。",
    "{exercise}: not yet.": "{exercise}：还没有通过。",
    "a multiple of {count}": "{count} 的倍数个",
    "at least {count}": "至少 {count} 个",
    "this exercise needs {need} ranks; the pool has {size} (%mpi restart -n 4).":
        "这个练习需要{need} rank；当前进程池有 {size} 个（运行 %mpi restart -n 4）。",
    "what mpinb saw: {diagnosis}": "mpinb 看到的情况：{diagnosis}",
    "`{function}` is not defined on every rank (missing on ranks {ranks}): define it in a %%mpi cell, so "
    "that every rank has it.":
        "`{function}` 没有在每个 rank 上定义（rank {ranks} 上缺少）：请在 %%mpi 单元格中定义它，让每个 rank 都有。",
    "`{function}` is not written yet (it raises NotImplementedError): write its body in the %%mpi cell "
    "above, run that cell, then check again.":
        "`{function}` 还没有写（它引发 NotImplementedError）：在上面的 %%mpi 单元格中写好函数体，"
        "运行该单元格，再检查一次。",
    "`{function}` raised {error} on ranks {ranks}.": "`{function}` 在 rank {ranks} 上引发了 {error}。",
    "rank {rank} returned {got} for {what}; expected {want}.":
        "rank {rank} 对 {what} 返回了 {got}；期望的是 {want}。",
    # -- hang hints of the exercises
    "the ranks deadlocked: each waits for a message or a collective another never starts.":
        "各 rank 死锁了：每个 rank 都在等一条消息或一个集合操作，而另一方永远不会开始它。",
    "the exchange deadlocked: both partners send first, and a large send waits for its receive. Let even "
    "ranks send first and odd ranks receive first, or use comm.Sendrecv, or Isend/Irecv and then wait.":
        "交换死锁了：两个搭档都先发送，而大消息的发送要等对方接收。让偶数 rank 先发送、奇数 rank 先接收，"
        "或者使用 comm.Sendrecv，或者先 Isend/Irecv 再等待。",
    "the ring deadlocked: use comm.Sendrecv (send right, receive from the left in one call) at every step, "
    "so that no rank waits for a neighbour that is also waiting.":
        "环死锁了：每一步都使用 comm.Sendrecv（一次调用中向右发送、从左接收），这样就没有 rank 会去等"
        "一个同样在等待的邻居。",
    "the halo exchange deadlocked: with nonblocking calls, post all receives and sends first and wait "
    "afterwards.":
        "晕环交换死锁了：使用非阻塞调用时，先发起所有的接收和发送，之后再等待。",
    # -- 00 parallel_sum
    "no rank communicated: each rank computed the whole sum alone. Let each rank sum its share "
    "(range(rank, n, size)) and combine the shares with comm.allreduce.":
        "没有任何 rank 进行通信：每个 rank 都独自算了整个和。让每个 rank 只对自己那一份求和"
        "（range(rank, n, size)），再用 comm.allreduce 把各份合起来。",
    "the shares were combined with point-to-point messages; one comm.allreduce does it in a single call, "
    "and every rank gets the total.":
        "各份是用点对点消息合起来的；一次 comm.allreduce 调用就能完成，而且每个 rank 都能得到总和。",
    # -- 01 exchange
    "rank {source} sent to rank {dest}; each rank should talk only to its partner rank ^ 1.":
        "rank {source} 发给了 rank {dest}；每个 rank 只应当与它的搭档 rank ^ 1 通信。",
    "rank {rank} sent {count} messages; one message per rank is enough.":
        "rank {rank} 发送了 {count} 条消息；每个 rank 一条就够了。",
    # -- 02 ring_allreduce
    "it calls {ops}: build the allreduce from Sendrecv between neighbours, not from a collective.":
        "它调用了 {ops}：请用邻居之间的 Sendrecv 来构造全归约，而不是用集合操作。",
    "rank {rank} sent to rank {dest}; in a ring each rank sends only to its right neighbour ({right}).":
        "rank {rank} 发给了 rank {dest}；在环中每个 rank 只向右边的邻居（{right}）发送。",
    "rank {rank} sent {count} messages; a ring allreduce sends 2(p-1) = {expected}: p-1 steps of "
    "reduce-scatter, then p-1 of all-gather.":
        "rank {rank} 发送了 {count} 条消息；环形全归约发送 2(p-1) = {expected} 条：p-1 步归约散发，"
        "再 p-1 步全收集。",
    "rank {rank} sent {nbytes} bytes in one message; each step should carry one chunk of n/p elements "
    "({chunk} bytes), which is what makes the ring cheap.":
        "rank {rank} 在一条消息中发送了 {nbytes} 字节；每一步只应传送 n/p 个元素的一块（{chunk} 字节），"
        "环的低开销正来自于此。",
    # -- 03 halo_exchange
    "it uses {ops}; post Irecv and Isend for both neighbours first, then wait for all four requests with "
    "MPI.Request.Waitall.":
        "它使用了 {ops}；请先为两侧邻居发起 Irecv 和 Isend，再用 MPI.Request.Waitall 等待全部四个请求。",
    "rank {rank} sent {count} messages to ranks {peers}; each rank sends one value to each of its two "
    "neighbours.":
        "rank {rank} 向 rank {peers} 发送了 {count} 条消息；每个 rank 应给两个邻居各发一个值。",
    # -- 04 grid_sums
    "split COMM_WORLD twice (color = row, then color = column) and reduce once on each of the two smaller "
    "communicators.":
        "把 COMM_WORLD 切分两次（先 color = 行号，再 color = 列号），在两个较小的通信域上各做一次归约。",
    "point-to-point messages were sent; one allreduce on the row communicator and one on the column "
    "communicator are all it takes.":
        "发送了点对点消息；在行通信域和列通信域上各做一次 allreduce 就足够了。",
    # -- 05 parallel_pi
    "the parts were combined with point-to-point messages; comm.allreduce combines them in one call (in "
    "log p steps) and gives every rank the result.":
        "各部分是用点对点消息合起来的；comm.allreduce 一次调用就能合并（用 log p 步），并让每个 rank "
        "都得到结果。",
    "no communication happened: every rank computed all n intervals. Give each rank every size-th "
    "interval, starting at its rank.":
        "没有发生任何通信：每个 rank 都算了全部 n 个区间。让每个 rank 从自己的 rank 开始、每隔 size "
        "个区间取一个。",
    # -- 06 pingpong
    "rank {rank} returned {value}; pingpong should return the one-way time of one message in seconds (a "
    "positive float, well under a second).":
        "rank {rank} 返回了 {value}；pingpong 应当返回一条消息单程的时间，以秒为单位（一个正的浮点数，"
        "远小于一秒）。",
    "rank {source} sent to rank {dest}; only ranks 0 and 1 take part in a ping-pong.":
        "rank {source} 发给了 rank {dest}；乒乓测试只有 rank 0 和 rank 1 参加。",
    "{count} messages were sent; pingpong(1024, 50) makes 50 round trips: 100.":
        "发送了 {count} 条消息；pingpong(1024, 50) 往返 50 次：应为 100 条。",
    "messages of {sizes} bytes were sent; send a buffer of exactly nbytes bytes "
    "(np.zeros(nbytes, dtype=np.uint8) with Send/Recv).":
        "发送的消息大小为 {sizes} 字节；请用 Send/Recv 发送恰好 nbytes 字节的缓冲区"
        "（np.zeros(nbytes, dtype=np.uint8)）。",
    # -- 07 bucket_allreduce
    "sum the buckets with Allreduce, one call per bucket, and nothing else.":
        "用 Allreduce 对各个桶求和，每个桶一次调用，不要用别的。",
    "one Allreduce per array: pack consecutive arrays into one flat buffer (np.concatenate) while they "
    "fit under limit bytes, and sum each buffer with one Allreduce.":
        "每个数组一次 Allreduce：只要不超过 limit 字节，就把相邻的数组打包进一个扁平缓冲区"
        "（np.concatenate），每个缓冲区用一次 Allreduce 求和。",
    "{calls} Allreduce for all five arrays: a bucket holds at most limit bytes (an array larger than "
    "limit goes alone), so these arrays need 3 buckets.":
        "五个数组一共只用了 {calls} 次 Allreduce：一个桶最多 limit 字节（比 limit 大的数组单独成桶），"
        "所以这些数组需要 3 个桶。",
    "{calls} Allreduce calls; consecutive arrays packed greedily under {limit} bytes make 3 buckets: "
    "[1000, 10, 10], [3000], [5] doubles.":
        "调用了 {calls} 次 Allreduce；把相邻数组贪心地打包到 {limit} 字节以内，得到 3 个桶："
        "[1000, 10, 10]、[3000]、[5] 个 double。",
    # -- 08 input_grad
    "the slices were gathered: that moves whole matrices, which tensor parallelism exists to avoid. Each "
    "rank multiplies its own slices (a partial sum over its hidden units) and one Allreduce adds the "
    "partial sums.":
        "你收集了各个切片：这会搬运整个矩阵，而张量并行存在的意义正是避免这样做。每个 rank 用自己的切片"
        "相乘（得到对其隐藏单元的部分和），再用一次 Allreduce 把部分和加起来。",
    "one Allreduce of the partial products grad_h_r @ W1_r.T is all it takes.":
        "对部分乘积 grad_h_r @ W1_r.T 做一次 Allreduce 就足够了。",
    # -- 09 pipeline_forward
    "rank {rank} returned {value}; only the last stage (rank {last}) returns the outputs, the other "
    "stages return None.":
        "rank {rank} 返回了 {value}；只有最后一个阶段（rank {last}）返回输出，其他阶段返回 None。",
    "a pipeline passes each micro-batch from one stage to the next with send and recv; no collective is "
    "needed.":
        "流水线用 send 和 recv 把每个微批次从一个阶段传到下一个阶段；不需要集合操作。",
    "rank {source} sent to rank {dest}; each stage sends only to the next one (rank + 1).":
        "rank {source} 发给了 rank {dest}；每个阶段只发给下一个阶段（rank + 1）。",
    "{count} messages; {micro} micro-batches through {size} stages make {expected} (one per micro-batch "
    "per link).":
        "共 {count} 条消息；{micro} 个微批次穿过 {size} 个阶段应为 {expected} 条（每条链路上每个微批次一条）。",
    # -- 10 stage_sum
    "make the communicator of one stage's replicas with comm.Split(color=stage) and sum over it with one "
    "allreduce: every rank of the world is not a replica of your stage.":
        "用 comm.Split(color=stage) 创建由同一阶段各副本组成的通信域，并在其上做一次 allreduce 求和："
        "并不是全局中的每个 rank 都是你这个阶段的副本。",
    "point-to-point messages were sent; one allreduce on the stage's communicator is enough.":
        "发送了点对点消息；在该阶段的通信域上做一次 allreduce 就够了。",
    # -- 11 zero_step
    "an Allreduce gives every rank the whole summed gradient, which ZeRO avoids: Reduce_scatter the "
    "gradient (each rank gets the sum of its own shard), update that shard, then Allgather(v) the "
    "parameters.":
        "Allreduce 让每个 rank 都得到完整的梯度和，而 ZeRO 正要避免这一点：对梯度做 Reduce_scatter"
        "（每个 rank 得到自己那一片的和），更新这一片，再对参数做 Allgather(v)。",
    "sum the gradients with Reduce_scatter, so that each rank receives only its shard's sum.":
        "用 Reduce_scatter 对梯度求和，使每个 rank 只收到自己那一片的和。",
    "after updating its shard, each rank needs everybody's: Allgather(v) the parameters.":
        "更新完自己那一片后，每个 rank 还需要所有人的：对参数做 Allgather(v)。",
    "point-to-point messages were sent; Reduce_scatter and Allgatherv are all it takes.":
        "发送了点对点消息；只需要 Reduce_scatter 和 Allgatherv。",
    # -- hang diagnosis
    "Deadlock: these ranks are blocked in MPI, each waiting for another.":
        "死锁：下列 rank 都阻塞在 MPI 中，每个都在等另一个。",
    "The ranks below are blocked in MPI and nothing they wait for is coming.":
        "下列 rank 阻塞在 MPI 中，而它们等待的东西永远不会到来。",
    "finished the run": "已经运行结束",
    "not running this cell (see --targets)": "没有运行这个单元格（见 --targets）",
    "Wait-for cycle: {cycle}": "等待环：{cycle}",
    "rank {rank} waits for {needed}, which will not take part.": "rank {rank} 在等 {needed}，而它们不会参与。",
    "rank {rank} waits for a message with tag {tag} from {source}, but the one that rank {sender} sent has tag "
    "{other} ({size}): did you mean tag {other}?":
        "rank {rank} 在等 {source} 发来的 tag 为 {tag} 的消息，但 rank {sender} 发出的那条消息 "
        "tag 是 {other}（{size}）：你是想用 tag {other} 吗？",
    "rank {rank}: {op} at line {line} was never completed (no wait or test saw it finish): until it is, its buffer "
    "belongs to MPI, and the run may end before the message moves. Wait for it (req.wait(), MPI.Request.Waitall) "
    "before the cell ends.":
        "rank {rank}：第 {line} 行的 {op} 从未完成（没有任何 wait 或 test 看到它结束）：在完成之前，它的缓冲区归 MPI "
        "所有，而且运行可能在消息发出之前就结束了。请在单元格结束前等待它（req.wait()、MPI.Request.Waitall）。",
    "MPI correctness: this run works only by accident ({count}):": "MPI 正确性：本次运行只是碰巧能工作（{count} 处）：",
    "rank {rank} receives on communicator {comm}, but rank {sender} sends to it on {other} (line {line}): a message "
    "is received only on the communicator it was sent on.":
        "rank {rank} 在通信子 {comm} 上接收，但 rank {sender} 是在 {other} 上发给它的（第 {line} 行）：消息只能在"
        "发送它的那个通信子上被接收。",
    "each {wait}": "都在 {wait}",
    "its left neighbour (rank - 1)": "左邻居（rank - 1）",
    "its right neighbour (rank + 1)": "右邻居（rank + 1）",
    "{op} to rank {peer}": "{op} 发往 rank {peer}",
    "{op} from {source}": "{op} 来自 {source}",
    "any rank": "任意 rank",
    "{op} on communicator {comm}": "{op}，通信域 {comm}",
    "{op} on window {comm}": "{op}，窗口 {comm}",
    "{op} on file {comm}": "{op}，文件 {comm}",
    "{op} on window {comm}, for {origins} to call Win.Complete":
        "{op}，窗口 {comm}，等待 {origins} 调用 Win.Complete",
    " (root {root})": "（根进程 {root}）",
    " at line {line}": "，第 {line} 行",
    " of {file}": "，文件 {file}",
    ", waiting {seconds} s": "，已等待 {seconds} 秒",
    "Each rank sends before it receives. Small messages are buffered, so this often works; large ones are "
    "not, so every send waits for a receive that its neighbour posts only after its own send has "
    "completed.":
        "每个 rank 都先发送后接收。小消息会被缓冲，所以这样常常能行；大消息不会，于是每次发送都在等一个"
        "接收，而邻居要等自己的发送完成后才会发起这个接收。",
    "Each rank sends before it receives, with a synchronous send (ssend), which waits for its receive "
    "whatever the size: every send waits for a receive that its neighbour posts only after its own send "
    "has completed. A standard send may do the same at any size.":
        "每个 rank 都先用同步发送（ssend）再接收，而同步发送无论消息多大都要等到对方接收：每次发送都在"
        "等一个接收，而邻居要等自己的发送完成后才会发起它。标准模式的发送在任何大小下也都可能如此。",
    "Each rank waits to receive before it sends, so no message is ever sent.":
        "每个 rank 都在发送之前等待接收，所以没有任何消息被发出。",
    "The ranks are not in the same collective call: every rank of a communicator must call the same "
    "collectives, in the same order.":
        "各 rank 不在同一个集合操作调用中：通信域中的每个 rank 都必须以相同的顺序调用相同的集合操作。",
    "Usual fixes: order by rank (even ranks send first, odd ranks receive first); use comm.sendrecv(...) "
    "for an exchange; or post comm.irecv(...) and comm.isend(...) and wait for both.":
        "常见修复：按 rank 安排顺序（偶数 rank 先发送，奇数 rank 先接收）；交换时使用 comm.sendrecv(...)；"
        "或者先发起 comm.irecv(...) 和 comm.isend(...)，再等待两者完成。",
    # -- a run that was stopped, and errors of many ranks
    "the run was interrupted; the ranks were sent an interrupt.": "运行被中断；已向各 rank 发送中断信号。",
    "the run did not finish within {timeout} s; the ranks were sent an interrupt.":
        "运行未能在 {timeout} 秒内完成；已向各 rank 发送中断信号。",
    "{stuck} did not stop within {seconds} s of the interrupt: an interrupt cannot break off such a call "
    "(a blocking MPI call that mpinb does not trace, or a long C function)":
        "{stuck} 在收到中断信号后 {seconds} 秒内仍未停下：中断无法打断这样的调用（mpinb 不跟踪的阻塞式 "
        "MPI 调用，或耗时很长的 C 函数）",
    "{ranks} ({place})": "{ranks}（{place}）",
    "its stack could not be read": "无法读取其调用栈",
    "in {function} of {file}": "位于 {file} 的 {function} 中",
    "in `{code}`, line {line}": "位于 `{code}`，第 {line} 行",
    "at line {line}": "位于第 {line} 行",
    ", inside {function} of {file}": "，在 {file} 的 {function} 内部",
    "the ranks could not make a fresh MPI world after the aborted run ({why})":
        "运行中止后，各 rank 无法一起建立新的 MPI 通信域（{why}）",
    "{why}, so the pool was restarted with {n} fresh ranks: every rank's variables are lost; the pool's "
    "settings are kept.":
        "{why}，因此进程池已用 {n} 个新的 rank 重新启动：各 rank 的变量全部丢失；进程池的设置保持不变。",
    "{why}. The pool could not start again ({error}); `%mpi restart` (Pool.restart()) tries again.":
        "{why}。进程池无法再次启动（{error}）；`%mpi restart`（Pool.restart()）会再试一次。",
    "{why}, so the pool was restarted: {n} fresh ranks are starting in the background, and the next run waits "
    "for them; every rank's variables are lost; the pool's settings are kept.":
        "{why}，因此进程池已重新启动：{n} 个新的 rank 正在后台启动，下一次运行会等待它们就绪；各 rank 的变量全部丢失；"
        "进程池的设置保持不变。",
    "the pool could not start again after the last failure ({error}); `%mpi restart` (Pool.restart()) tries "
    "again.":
        "上次故障之后进程池无法再次启动（{error}）；`%mpi restart`（Pool.restart()）会再试一次。",
    "MPI requests that interrupts left pending, {count} in all on {ranks}, keep their buffers allocated (so "
    "that MPI never writes to freed memory) until the pool restarts (`%mpi restart`).":
        "因中断而未完成的 MPI 请求（{ranks} 上共 {count} 个）会一直保留其缓冲区（以免 MPI 写入已释放的内存），"
        "直到进程池重新启动（`%mpi restart`）。",
    "{ranks} raised {error}": "{ranks} 引发了 {error}",
    "waiting in {wait}": "正在等待 {wait}",
    "stopped (not waiting in MPI)": "已停止（不在 MPI 中等待）",
    "{ranks} was {what}": "{ranks} {what}",
    "{ranks} were {what}": "{ranks} {what}",
    "{ranks} finished without error": "{ranks} 正常结束",
    "{op} (line {line})": "{op}（第 {line} 行）",
    # -- the debugger: stacks, breakpoints, post-mortem, inspect
    "Where the ranks were when the run was stopped:": "运行停止时各 rank 所在的位置：",
    "{n} ranks: {parts}{sampled}": "{n} 个 rank：{parts}{sampled}",
    " (sampled {count} times)": "（采样 {count} 次）",
    "idle": "空闲",
    "running": "正在运行",
    "waiting in MPI": "在 MPI 中等待",
    "stopped at a breakpoint": "停在断点处",
    "read from outside": "从外部读取",
    "unknown": "未知",
    "cell line {line}": "单元格第 {line} 行",
    "{function}() line {line}": "{function}() 第 {line} 行",
    "{file} line {line}": "{file} 第 {line} 行",
    "{function}() line {line} of {file}": "{file} 中 {function}() 第 {line} 行",
    "waiting in {op} {peers}": "在 {op} 中等待（{peers}）",
    " for {seconds} s": "，已 {seconds} 秒",
    "to rank {peer}": "发往 rank {peer}",
    "from rank {peer}": "来自 rank {peer}",
    "to rank r{step}": "发往 rank r{step}",
    "from rank r{step}": "来自 rank r{step}",
    "to {ranks}": "发往 {ranks}",
    "from {ranks}": "来自 {ranks}",
    "on communicator {comm}": "在通信域 {comm} 上",
    "on window {comm}": "在窗口 {comm} 上",
    "on file {comm}": "在文件 {comm} 上",
    "Every rank of a window's group must call Fence (and Win.Free) the same number of times, in the same "
    "order; a target's Win.Wait ends once each origin it posted to calls Win.Complete.":
        "窗口组中的每个 rank 都必须以相同的次数、相同的顺序调用 Fence（以及 Win.Free）；目标进程的 Win.Wait "
        "要等它 Post 的每个源进程都调用了 Win.Complete 才会结束。",
    "in a call that does not return to Python (read from outside)": "处在不返回 Python 的调用中（从外部读取）",
    "in {place}": "位于 {place}",
    ", has not moved for {seconds} s": "，已 {seconds} 秒没有前进",
    ", {ranks} have not moved": "，其中 {ranks} 没有前进",
    "it did not answer and its stack could not be read from outside": "它没有应答，也无法从外部读取其调用栈",
    "{ranks} stopped at {place}: {code}": "{ranks} 停在{place}：{code}",
    "line {line}": "第 {line} 行",
    ": waiting for rank {peer}, stopped at line {line}": "：在等待停在第 {line} 行的 rank {peer}",
    "{ranks} running": "{ranks} 正在运行",
    "{ranks} done with this run": "{ranks} 已完成本次运行",
    "{ranks} not stopped at a breakpoint (running, waiting or done): debugger commands go to stopped ranks "
    "({stopped})":
        "{ranks} 没有停在断点处（正在运行、等待或已完成）：调试命令只能发给停下的 rank（{stopped}）",
    "none": "无",
    "{ranks} stopped at a breakpoint, but nobody can type commands here (a headless run): they continue.":
        "{ranks} 停在断点处，但这里无法输入命令（无界面运行）：它们继续运行。",
    "the run was ended from the debugger (q)": "运行已在调试器中结束（q）",
    "rank {rank}, {kind}:": "rank {rank}，{kind}：",
    "the last run did not fail on any rank: nothing to debug post-mortem (name a rank to look into a running one)":
        "上一次运行在所有 rank 上都没有失败：没有可以事后调试的内容（指定一个 rank 可以查看正在运行的 rank）",
    "{expr} on {n} ranks": "{expr} 在 {n} 个 rank 上",
    ": the same on every rank": "：所有 rank 上都相同",
    ": a different value on every rank": "：每个 rank 上的值都不同",
    ": {ranks} differs from the others": "：{ranks} 与其他 rank 不同",
    ": {ranks} differ from the others": "：{ranks} 与其他 rank 不同",
    "{ranks} have no variable {name!r} (inspect evaluates {expr!r} on each rank)":
        "{ranks} 没有变量 {name!r}（inspect 在每个 rank 上计算 {expr!r}）",
    "{who}: shape {shape}, the others' {reference}": "{who}：形状为 {shape}，其他 rank 为 {reference}",
    "{who}: {blocks} of the array's {total} blocks differ from {reference}'s; first: {named}":
        "{who}：数组的 {total} 个块中有 {blocks} 个与 {reference} 不同；最先几处：{named}",
    "Commands go to every stopped rank, or to the ranks before a colon: `2: p x`, `0-3: n`,\n"
    "`@12: c` (the ranks stopped at line 12). They are pdb's: p EXPR, pp EXPR, n(ext), s(tep), c(ontinue),\n"
    "r(eturn), unt(il), w(here), u(p), d(own), l(ist), a(rgs), any Python statement. Also:\n"
    "  view        which ranks are stopped where, and which run\n"
    "  stacks      every rank's stack, merged\n"
    "  inspect E   the value of E on every stopped rank, side by side\n"
    "  detach      continue, and let breakpoint() no longer stop in this run\n"
    "  q           end the run (as the stop button does)":
        "命令发给所有停下的 rank，或发给冒号前的 rank：`2: p x`、`0-3: n`、`@12: c`（停在第 12 行的 rank）。\n"
        "命令就是 pdb 的命令：p 表达式、pp 表达式、n(ext)、s(tep)、c(ontinue)、r(eturn)、unt(il)、w(here)、u(p)、\n"
        "d(own)、l(ist)、a(rgs)，以及任何 Python 语句。另外还有：\n"
        "  view        哪些 rank 停在哪里，哪些在运行\n"
        "  stacks      所有 rank 的调用栈，合并显示\n"
        "  inspect E   在每个停下的 rank 上计算 E，并排比较\n"
        "  detach      继续运行，并且本次运行中 breakpoint() 不再停下\n"
        "  q           结束本次运行（同停止按钮）",
    # -- the exercises added to 01, 02 and 04
    "the received arrays have the wrong lengths: size each buffer from the probed Status "
    "(np.empty(status.Get_count(MPI.DOUBLE))) before the Recv.":
        "收到的数组长度不对：在 Recv 之前，按探测到的 Status 确定每个缓冲区的大小"
        "（np.empty(status.Get_count(MPI.DOUBLE))）。",
    "rank 0 cannot know each message's size in advance: Probe it first (comm.Probe(source=MPI.ANY_SOURCE, tag=7, "
    "status=status)), then size the buffer from status.Get_count(MPI.DOUBLE).":
        "rank 0 事先无法知道每条消息的大小：先探测它（comm.Probe(source=MPI.ANY_SOURCE, tag=7, status=status)），"
        "再按 status.Get_count(MPI.DOUBLE) 确定缓冲区的大小。",
    "rank 0 took the messages in the order they were sent: a receive picks its message by source and tag, so "
    "receive tag=2 first, then tag=1.":
        "rank 0 按发送的顺序取了消息：接收按来源和标签挑选消息，所以先接收 tag=2，再接收 tag=1。",
    "move the arrays as buffers with comm.Gatherv: gather the counts first (comm.gather(len(local), root=0)), "
    "then Gatherv(local, [whole, counts]) on the root into one array.":
        "用 comm.Gatherv 以缓冲区的形式搬运数组：先收集各 rank 的个数（comm.gather(len(local), root=0)），"
        "再在根进程上用 Gatherv(local, [whole, counts]) 收进一个数组。",
    "every rank received more than its own offset; comm.exscan(count) gives each rank the sum of the counts "
    "before it (None on rank 0, which starts at 0).":
        "每个 rank 收到的不只是它自己的偏移；comm.exscan(count) 让每个 rank 得到它之前各 rank 个数之和"
        "（rank 0 得到 None，它从 0 开始）。",
    "let MPI arrange the grid: cart = comm.Create_cart(dims=[2, size // 2], periods=[True, True]), then "
    "cart.Shift(0, 1) gives (up, down) and cart.Shift(1, 1) gives (left, right).":
        "让 MPI 来排列网格：cart = comm.Create_cart(dims=[2, size // 2], periods=[True, True])，"
        "然后 cart.Shift(0, 1) 给出 (上, 下)，cart.Shift(1, 1) 给出 (左, 右)。",
    "the new ranks follow the old order: key orders the ranks inside a color, so key=-rank (or size - rank) puts "
    "the highest old rank first.":
        "新的进程号沿用了原来的顺序：key 决定同一 color 内各 rank 的顺序，所以 key=-rank（或 size - rank）"
        "让原进程号最大的 rank 排在最前。",
    "make the two groups with comm.Split(color=rank % 2, key=-rank), then reduce on the new communicator.":
        "用 comm.Split(color=rank % 2, key=-rank) 分出两组，再在新的通信域上归约。",
    # -- the exercise of 14-data-layout-io
    "the file held {got}; expected every rank's block in rank order: {want}.":
        "文件中是 {got}；应当是按进程号顺序排列的各 rank 的块：{want}。",
    "each rank wrote on its own: one collective Write_at_all (every rank at its byte offset) lets MPI combine the "
    "pieces into large writes.":
        "各 rank 各写各的：一次集合调用 Write_at_all（每个 rank 在自己的字节偏移处写）能让 MPI 把各片合并成大块写入。",
    "gathering every size works but moves more than needed: comm.exscan(local.nbytes) gives each rank its own byte "
    "offset.":
        "收集所有人的大小也行，但搬运的比需要的多：comm.exscan(local.nbytes) 让每个 rank 得到自己的字节偏移。",
    # -- the exercise of 15-threads
    "both exchanges ran on one communicator, where a thread's receive can take the message meant for the other "
    "thread: give each thread its own comm.Dup().":
        "两组交换都在同一个通信域上进行，一个线程的接收可能取走发给另一个线程的消息：给每个线程一个自己的 comm.Dup()。",
    # -- the exercise of 16-training-at-scale
    "move each rank's piece once, as a buffer: comm.Allgatherv(shard, [whole, counts]) puts every piece where it "
    "belongs in one call.":
        "把每个 rank 的那一片以缓冲区的形式只搬运一次：comm.Allgatherv(shard, [whole, counts]) 一次调用就把每一片"
        "放到该在的位置。",
    "it calls {count} collectives ({ops}); one Allgatherv is enough.":
        "它调用了 {count} 次集合操作（{ops}）；一次 Allgatherv 就够了。",
    # -- the exercise of 13-one-sided
    "rank {rank} returned {got}; fetch_tickets should return the list of ticket numbers (ints) it took.":
        "rank {rank} 返回了 {got}；fetch_tickets 应当返回它取到的票号（整数）列表。",
    "tickets {tickets} were taken by more than one rank: reading the counter and writing it back are two steps, "
    "and another rank can come in between. Fetch_and_op reads and adds in one atomic step.":
        "票号 {tickets} 被不止一个 rank 取走了：读出计数器再写回去是两步，另一个 rank 可能插在中间。"
        "Fetch_and_op 在一个原子步骤里完成读取和相加。",
    "the ranks took tickets {taken}; together they should take each of 0..{last} once (missing: {missing}, beyond "
    "the tasks: {extra}). Keep fetching until a ticket is tasks or more, and do not keep that one.":
        "各 rank 取到的票号是 {taken}；它们合起来应当把 0..{last} 各取一次（缺少：{missing}，超出任务数：{extra}）。"
        "一直取，直到取到的票号大于或等于任务数为止，而且不要保留这一张。",
    "point-to-point messages were sent; a counter in a window needs none: each rank updates it with Fetch_and_op, "
    "and rank 0 calls nothing.":
        "发送了点对点消息；窗口中的计数器不需要任何消息：每个 rank 用 Fetch_and_op 更新它，rank 0 什么也不用调用。",
    "take each ticket with Fetch_and_op (inside Lock and Unlock of rank 0's window): it returns the counter and "
    "adds one to it in one atomic step.":
        "用 Fetch_and_op 取每一张票（在 rank 0 窗口的 Lock 和 Unlock 之间）："
        "它在一个原子步骤里返回计数器的值并把它加一。",
    # -- the exercise of 12-debugging
    "every rank returned the mean of the ranks' means: the blocks differ in size, so each rank's mean must weigh "
    "as many items as it has. Add up the sums and the counts, then divide.":
        "每个 rank 都返回了各 rank 平均值的平均值：各块大小不同，所以每个 rank 的平均值应按它拥有的元素个数加权。"
        "先把各 rank 的和与个数分别加起来，再相除。",
    "the ranks gathered each other's values: one comm.allreduce of a (sum, count) pair gives every rank both totals "
    "at once.":
        "各 rank 收集了彼此的值：对 (和, 个数) 这一对数做一次 comm.allreduce，就能让每个 rank 同时得到两个总数。",
    "point-to-point messages were sent; one comm.allreduce of (sum, count) gives every rank the total.":
        "发送了点对点消息；对 (和, 个数) 做一次 comm.allreduce 就能让每个 rank 得到总数。",
    "it calls {count} collectives ({ops}); one allreduce of a (sum, count) pair is enough.":
        "它调用了 {count} 次集合操作（{ops}）；对 (和, 个数) 这一对数做一次 allreduce 就够了。",
    "; ": "；",
    # -- data moves that were stopped or failed
    "the push of {names}": "{names} 的 push",
    "the pull of {names}": "{names} 的 pull",
    "the scatter of {names}": "{names} 的 scatter",
    "interrupted": "被中断",
    "it did not end within {seconds} s": "它没有在 {seconds} 秒内结束",
    "withdrawn before it started": "在开始之前被撤回",
    "{move} stopped: {why}": "{move}已停止：{why}",
    "{move} failed": "{move}失败",
    "{ranks}: {why}": "{ranks}：{why}",
    "{ranks} did not answer in time (their part is withdrawn, unless it had started)":
        "{ranks} 没有及时应答（如果尚未开始，它们的那一部分已被撤回）",
    "{ranks} have the new value": "{ranks} 已有新值",
    "{ranks} keep what they had": "{ranks} 保留原来的值",
    "nothing was returned, run it again": "没有返回任何结果，请重新运行",
    "the data move had ended when the interrupt came: a push or scatter is complete on every rank":
        "中断到来时数据传输已经结束：push 或 scatter 已在每个 rank 上完成",
    # -- correctness checks of --verify runs
    "The answers are right, but only by accident: {finding}": "答案是对的，但只是碰巧对：{finding}",
    "{size} bytes": "{size} 字节",
    "with {op}": "使用 {op}",
    "{who} gave {way}": "{who} 给出 {way}",
    "{op} at line {line}: {gave}. MPI requires the same amount of data and the same operation on every "
    "rank and does not check it: the result is wrong or the run hangs on another MPI. Give every rank "
    "the same count, type and op.":
        "第 {line} 行的 {op}：{gave}。MPI 要求每个 rank 给出相同的数据量和相同的运算，但它不检查："
        "结果会出错，或者换一个 MPI 就会挂住。请让每个 rank 使用相同的个数、类型和运算。",
    "MPI correctness (--verify): nothing found in {calls} MPI calls.":
        "MPI 正确性检查（--verify）：在 {calls} 次 MPI 调用中没有发现问题。",
    "{op} at line {line} on {who}": "{who} 第 {line} 行的 {op}",
    "{calls}: this exchange finishes only because MPI buffered a message (a standard send may return before "
    "its receive starts). Under an MPI or a message size that does not buffer, these ranks deadlock there. "
    "Order the calls so that every send meets a posted receive (even ranks send first, odd ranks receive "
    "first), or use sendrecv, or Isend/Irecv and then Waitall.":
        "{calls}：这次交换能够结束，只是因为 MPI 缓冲了消息（标准发送可能在对应的接收开始之前就返回）。"
        "换一个不缓冲的 MPI 或更大的消息，这些 rank 会在这里死锁。请调整调用顺序，使每个发送都遇到已发布的接收"
        "（偶数 rank 先发送，奇数 rank 先接收），或者使用 sendrecv，或者 Isend/Irecv 之后再 Waitall。",
    "{calls}: this run finishes only because MPI let a collective end before every rank joined it, or "
    "buffered a message (a standard send may return before its receive starts). Under an MPI or a message "
    "size that does neither, these ranks deadlock there. Call the collectives in the same order, relative "
    "to the sends and receives, on every rank.":
        "{calls}：这次运行能够结束，只是因为 MPI 让某个集合操作在所有 rank 加入之前就结束了，"
        "或者缓冲了消息（标准发送可能在对应的接收开始之前就返回）。换一个两者都不做的 MPI 或更大的消息，"
        "这些 rank 会在这里死锁。请在每个 rank 上以相同的顺序（相对于发送和接收）调用集合操作。",
    "{who}: {recv_op} at line {recv_line} received {sent} values (sent by {send_op} at line {send_line} "
    "on rank {sender}) into a buffer of {received} values: MPI copies the bytes, so the values read are wrong. "
    "Receive into a buffer of the sender's type (np.empty(n, dtype=np.{sent})), or send {received}.":
        "{who}：第 {recv_line} 行的 {recv_op} 把 {sent} 数据（由 rank {sender} 第 {send_line} 行的 {send_op} 发送）"
        "接收到了 {received} 类型的缓冲区中：MPI 只复制字节，所以读到的值是错的。请用发送方的类型接收"
        "（np.empty(n, dtype=np.{sent})），或者发送 {received}。",
    "{who}: the buffer of {op} at line {line} changed before the send completed (seen when line {done} "
    "completed it): MPI may send the old values, the new ones or a mix. Write to the buffer only after "
    "the request's Wait, or send a copy.":
        "{who}：第 {line} 行 {op} 的缓冲区在发送完成之前被修改了（第 {done} 行完成它时发现）：MPI 可能发送旧值、新值或"
        "两者的混合。请在请求的 Wait 之后再写这个缓冲区，或者发送一份副本。",
    "{who}: the buffer of {op} at line {line} was written while the receive was pending (line {done} "
    "completed it): it no longer holds what {send_op} at line {send_line} on rank {sender} sent. From the "
    "post until the wait completes, a receive buffer belongs to MPI: reading it gives old or partial "
    "values, writing it loses the message. Use the buffer only after the request's Wait.":
        "{who}：第 {line} 行 {op} 的缓冲区在接收尚未完成时被写入了（第 {done} 行完成它）：它存放的已不是 rank {sender} "
        "第 {send_line} 行 {send_op} 发送的内容。从发起接收到 wait 完成，接收缓冲区归 MPI 所有：此时读它会得到旧值或"
        "不完整的值，写它会丢掉消息。请在请求的 Wait 之后再使用这个缓冲区。",
    "{op} at line {line}": "第 {line} 行的 {op}",
    "{op} at line {line} of an earlier cell": "之前某个单元格第 {line} 行的 {op}",
    "{who}: {op} at line {line} {uses} memory that {other_op} at line {other_line}, still pending, "
    "{other_uses}: MPI may write one over the other while both are in flight (MPI forbids it). Give "
    "each pending call a buffer of its own, or wait for the first before the second starts.":
        "{who}：第 {line} 行的 {op} {uses}的内存，与仍未完成的第 {other_line} 行 {other_op} {other_uses}的内存重叠："
        "两者同时进行时，MPI 可能用一个覆盖另一个（MPI 禁止这样做）。请给每个未完成的调用各自的缓冲区，"
        "或者先等第一个完成再开始第二个。",
    "receives into": "接收写入",
    "sends from": "发送读取",
    "receives into too": "接收写入",
    "sends from too": "发送读取",
    "for rank {peer}, which sent only {lost} later ({peer_op}, line {peer_line})":
        "rank {peer} 晚了 {lost} 才发送（{peer_op}，第 {peer_line} 行）",
    "for rank {peer} to post its receive ({peer_op}, line {peer_line})":
        "等 rank {peer} 发起接收（{peer_op}，第 {peer_line} 行）",
    "for rank {peer}, the last to arrive ({peer_op}, line {peer_line}): load imbalance":
        "等最后到达的 rank {peer}（{peer_op}，第 {peer_line} 行）：负载不均衡",
    "for rank {peer}, which held the window's lock since line {peer_line} ({peer_op})":
        "等 rank {peer}：它从第 {peer_line} 行（{peer_op}）起一直持有该窗口的锁",
    "for rank {peer}, which exposed its window only {lost} later ({peer_op}, line {peer_line})":
        "等 rank {peer}：它晚了 {lost} 才开放窗口（{peer_op}，第 {peer_line} 行）",
    "rank {rank} waited {lost} in {where} {why}": "rank {rank} 在 {where}中等待了 {lost}：{why}",
    "critical path: none, the run was stopped before it finished": "关键路径：无，运行在结束前被停止了",
    "critical path: no MPI calls recorded": "关键路径：没有记录到 MPI 调用",
    "critical path ({seconds} s): {path}": "关键路径（{seconds} s）：{path}",
    "line {line}: {op}": "第 {line} 行：{op}",
    "computing after the last MPI call": "最后一次 MPI 调用之后的计算",
    "computing before line {line}": "第 {line} 行之前的计算",
    "line {line} of an earlier cell": "之前某个单元格的第 {line} 行",
    "{who}: a window made by {where} was dropped without Free() ({count} so far in this pool): MPI keeps it, and "
    "the memory it exposes, until the pool stops. Call Free() on it (on every rank of its communicator: it is "
    "collective) when it is no longer needed.":
        "{who}：由{where}创建的窗口没有调用 Free() 就被丢弃了（本进程池中迄今共 {count} 个）：MPI 会一直保留它"
        "及其公开的内存，直到进程池停止。不再需要时请对它调用 Free()（这是集合操作：要在其通信域的每个 rank 上调用）。",
    "{who}: a derived datatype (first used at {where}) was dropped without Free() ({count} so far in this pool): "
    "MPI keeps it until the pool stops. Call Free() on it when it is no longer needed.":
        "{who}：一个派生数据类型（首次使用于{where}）没有调用 Free() 就被丢弃了（本进程池中迄今共 {count} 个）："
        "MPI 会一直保留它直到进程池停止。不再需要时请对它调用 Free()。",
    "{who}: a communicator made by {where} was dropped without Free() ({count} so far in this pool): MPI keeps it "
    "until the pool stops, and it has room for only a few thousand (MPICH: 2048), so a cell run again and again "
    "runs out. Call Free() on it when it is no longer needed.":
        "{who}：由{where}创建的通信域没有调用 Free() 就被丢弃了（本进程池中迄今共 {count} 个）："
        "MPI 会一直保留它直到进程池停止，而它只能容纳几千个（MPICH：2048 个），"
        "所以反复运行的单元格会把它们用尽。不再需要时请对它调用 Free()。",
    "The next receive that matches it, perhaps in a later cell, takes it instead of the message it waits for: "
    "receive every message that is sent (or do not send it).":
        "下一个与之匹配的接收（也许在之后的单元格中）会取走它，而不是它真正等待的消息：每条发送的消息都要接收（否则就不要发送）。",
    "rank {rank}: the message that {op} at line {line} on rank {source} sent (tag {tag}, {size} bytes) was never "
    "received. {fix}":
        "rank {rank}：rank {source} 上第 {line} 行的 {op} 发送的消息（tag {tag}，{size} 字节）从未被接收。{fix}",
    "rank {rank}: a message from rank {source} (tag {tag}, {size} bytes, sent in an earlier cell) waits on "
    "communicator {comm} and no receive took it. {fix}":
        "rank {rank}：一条来自 rank {source} 的消息（tag {tag}，{size} 字节，在之前的单元格中发送）在通信域 {comm} "
        "上等待，没有任何接收取走它。{fix}",
    "{who}: {op} at line {line} receives from ANY_SOURCE: it took the message of rank {source} ({send} at line "
    "{send_line}) while rank {other}'s ({other_send} at line {other_line}) was on its way too. Which one it takes "
    "depends on timing, so the result may change from run to run. Name the source you expect, or pass a status and "
    "handle the messages in any order (status.Get_source()).":
        "{who}：第 {line} 行的 {op} 从 ANY_SOURCE 接收：它取走了 rank {source} 的消息（第 {send_line} 行的 {send}），"
        "而 rank {other} 的消息（第 {other_line} 行的 {other_send}）也已在途。取走哪一条取决于时序，"
        "所以结果可能每次运行都不同。请指明你期望的来源，或传入 status 并以任意顺序处理消息（status.Get_source()）。",
    "rank {rank} gives {own} bytes where the counts say {expected}":
        "rank {rank} 给出 {own} 字节，而计数说是 {expected}",
    "the ranks' counts differ": "各 rank 的计数不一致",
    "{op} at line {line}: {says} (counts in bytes: {counts}). MPI checks only that a message fits: fewer bytes "
    "leave the rest of a slot as it was, silently, and more fail. Make the counts say what each rank gives.":
        "第 {line} 行的 {op}：{says}（以字节计的计数：{counts}）。MPI 只检查消息是否放得下：字节少了，"
        "槽位其余部分会悄无声息地保持原样；字节多了则会失败。请让计数与每个 rank 给出的数据一致。",
    "rank {sender} sends {sent} bytes to rank {receiver}, which expects {expected}":
        "rank {sender} 向 rank {receiver} 发送 {sent} 字节，而后者期望 {expected} 字节",
    "{op} at line {line}: {says}. MPI checks only that a message fits: fewer bytes leave the rest of a slot "
    "as it was, silently, and more fail. Make each rank's send counts match its partners' receive counts.":
        "第 {line} 行的 {op}：{says}。MPI 只检查消息是否放得下：字节少了，槽位其余部分会悄无声息地保持原样；"
        "字节多了则会失败。请让每个 rank 的发送计数与其伙伴的接收计数一致。",
    # -- the trace views' words (mpinb/widgets/trace.py VIEW_WORDS, said by trace.js)
    "Space-time": "时空图",
    "Matrix": "通信矩阵",
    "Per rank": "各 rank",
    "Statistics": "统计",
    "compact": "收起",
    "expand": "展开",
    "{count} MPI calls": "{count} 次 MPI 调用",
    "{count} messages": "{count} 条消息",
    "{count} one-sided or neighbourhood flows": "{count} 条单边或邻域数据流",
    "stopped with {count} calls unfinished": "停止时有 {count} 个调用未完成",
    "{count} calls not recorded (buffer full)": "{count} 个调用未记录（缓冲区已满）",
    "ranks": "rank",
    "op": "操作",
    "comm": "通信域",
    "tag": "标签",
    "waits": "等待",
    "critical path": "关键路径",
    "all": "全部",
    "send": "发送",
    "recv": "接收",
    "collective": "集合通信",
    "wait": "等待完成",
    "rma": "单边通信",
    "epoch": "访问周期",
    "io": "文件读写",
    "computing": "计算",
    "waiting": "等待中",
    "unfinished": "未完成",
    "wheel: zoom, drag: pan, double-click: reset": "滚轮：缩放，拖动：平移，双击：复原",
    "peer": "对方",
    "displacement": "偏移（位移）",
    "offset": "文件偏移",
    "at": "开始于",
    "made in library code: {where}": "调用发生在库代码中：{where}",
    "unfinished: still waiting when the run stopped": "未完成：运行停止时仍在等待",
    "{kind}: waited {time} for rank {peer}": "{kind}：等待 rank {peer} {time}",
    "late sender": "发送迟到",
    "late receiver": "接收迟到",
    "wait at collective": "集合通信等待",
    "wait at barrier": "屏障等待",
    "lock held": "锁被占用",
    "late post": "目标开放迟到",
    "show": "显示",
    "from \\ to": "从 \\ 到",
    "child {n}": "子进程 {n}",
    "messages": "消息数",
    "bytes": "字节数",
    "time": "时间",
    "point-to-point messages and one-sided transfers from each rank to each rank":
        "每个 rank 发往每个 rank 的点对点消息与单边传输",
    "bytes sent point to point or one-sided from each rank to each rank":
        "每个 rank 以点对点或单边方式发往每个 rank 的字节数",
    "seconds from each send's start to its receive's end, summed (a late sender's wait included)":
        "从每次发送开始到对应接收结束的秒数之和（包括发送迟到造成的等待）",
    "{count} messages, {bytes}, {time}": "{count} 条消息，{bytes}，{time}",
    "Message sizes (messages sent, per operation)": "消息大小（按操作统计发送的消息数）",
    "Call durations (calls, per operation)": "调用耗时（按操作统计调用次数）",
    "rank": "rank",
    "time in MPI vs computing": "MPI 时间与计算时间",
    "wall": "总时间",
    "in MPI": "MPI 中",
    "msgs out": "发出消息",
    "msgs in": "收到消息",
    "bytes out": "发出字节",
    "bytes in": "收到字节",
    "wall ms": "总时间 ms",
    "waiting ms": "等待 ms",
    "{ms} ms, {calls} calls, {messages} messages": "{ms} ms，{calls} 次调用，{messages} 条消息",
    " (first {count} arrows)": "（只画前 {count} 个箭头）",
    "stopped while {what}": "停止时：{what}",
    "rank {rank} waited in {op} (line {line})": "rank {rank} 在 {op}（第 {line} 行）中等待",
    " for rank {peer}": "，等待 rank {peer}",
    "({count} calls not recorded on {ranks}: each rank records a share of the pool's trace_budget, at most "
    "trace_capacity calls; Pool(trace_budget=...) raises it)":
        "（{ranks} 上有 {count} 个调用未记录：每个 rank 只记录进程池 trace_budget 的一份，最多 trace_capacity "
        "个调用；可用 Pool(trace_budget=...) 调大）",
}
