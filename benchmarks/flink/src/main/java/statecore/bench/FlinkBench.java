package statecore.bench;

import java.io.BufferedWriter;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

import org.apache.flink.api.common.JobID;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.functions.AggregateFunction;
import org.apache.flink.api.common.functions.OpenContext;
import org.apache.flink.api.common.state.ValueState;
import org.apache.flink.api.common.state.ValueStateDescriptor;
import org.apache.flink.api.common.typeinfo.TypeInformation;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.connector.sink2.Sink;
import org.apache.flink.api.connector.sink2.SinkWriter;
import org.apache.flink.api.connector.sink2.WriterInitContext;
import org.apache.flink.api.java.tuple.Tuple3;
import org.apache.flink.configuration.CheckpointingOptions;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.configuration.StateBackendOptions;
import org.apache.flink.connector.file.src.FileSource;
import org.apache.flink.connector.file.src.reader.TextLineInputFormat;
import org.apache.flink.core.fs.Path;
import org.apache.flink.runtime.jobmaster.JobResult;
import org.apache.flink.runtime.minicluster.MiniCluster;
import org.apache.flink.runtime.minicluster.MiniClusterConfiguration;
import org.apache.flink.streaming.api.datastream.DataStream;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.functions.KeyedProcessFunction;
import org.apache.flink.streaming.api.functions.windowing.ProcessWindowFunction;
import org.apache.flink.streaming.api.graph.StreamGraph;
import org.apache.flink.streaming.api.windowing.assigners.TumblingEventTimeWindows;
import org.apache.flink.streaming.api.windowing.windows.TimeWindow;
import org.apache.flink.util.Collector;

/**
 * Java Flink beside statecore (benchmarks/flink_java.py runs it): one MiniCluster at parallelism
 * 2, one untimed warm-up run, then the timed run; one line of JSON on stdout.
 *
 * <p>Jobs: {@code sum} reads the events' CSV ({@code key,value,seq}, in seq order), keys them
 * by key and per event reads a ValueState, adds, writes it and emits {@code key,value,new_sum};
 * {@code window} sums each key's values per tumbling event-time window (event time = seq in
 * milliseconds, monotonous watermarks) and emits {@code key,window_start,total}. Both write
 * every output row to one CSV file per sink subtask. Checkpointing is on with an interval longer
 * than any run, so the only checkpoint is the final one (Flink's checkpoint after the end of a
 * bounded input, which the tasks wait for before they finish), triggered by this program as
 * soon as every sink subtask has flushed its last row: the run's time includes it.
 *
 * <p>Arguments: job backend(hashmap|rocksdb) input.csv output-dir checkpoint-dir window-ms
 * [warm-up.csv].
 */
public final class FlinkBench {
  static final AtomicInteger FLUSHED = new AtomicInteger();
  static final AtomicLong WRITTEN = new AtomicLong();
  static final AtomicInteger ATTEMPTS = new AtomicInteger();
  static final int PARALLELISM = 2;

  private FlinkBench() {}

  public static void main(String[] args) throws Exception {
    if (args.length < 6) {
      throw new IllegalArgumentException(
          "usage: FlinkBench sum|window hashmap|rocksdb input.csv output-dir checkpoint-dir "
              + "window-ms [warm-up.csv]");
    }
    String job = args[0];
    String backend = args[1];
    if (!job.equals("sum") && !job.equals("window")) {
      throw new IllegalArgumentException("job is sum or window, not " + job);
    }
    if (!backend.equals("hashmap") && !backend.equals("rocksdb")) {
      throw new IllegalArgumentException("backend is hashmap or rocksdb, not " + backend);
    }
    String input = args[2];
    String output = args[3];
    String checkpoints = args[4];
    long windowMs = Long.parseLong(args[5]);

    Configuration conf = new Configuration();
    conf.set(StateBackendOptions.STATE_BACKEND, backend);
    conf.set(CheckpointingOptions.CHECKPOINTS_DIRECTORY, Paths.get(checkpoints).toUri().toString());
    conf.set(CheckpointingOptions.CHECKPOINTING_INTERVAL, Duration.ofHours(1));
    conf.set(CheckpointingOptions.ENABLE_CHECKPOINTS_AFTER_TASKS_FINISH, true);
    // a final checkpoint that has not completed by then is expired and triggered again
    conf.set(CheckpointingOptions.CHECKPOINTING_TIMEOUT, Duration.ofSeconds(30));
    MiniClusterConfiguration cluster =
        new MiniClusterConfiguration.Builder()
            .setConfiguration(conf)
            .setNumTaskManagers(1)
            .setNumSlotsPerTaskManager(PARALLELISM)
            .setCommonBindAddress("127.0.0.1")
            .withRandomPorts()
            .build();
    try (MiniCluster mini = new MiniCluster(cluster)) {
      mini.start();
      double warmup = 0;
      if (args.length > 6) {
        warmup = run(mini, conf, job, args[6], output + "-warmup", windowMs)[0];
      }
      double[] timed = run(mini, conf, job, input, output, windowMs);
      System.out.printf(
          "{\"seconds\": %.6f, \"final_checkpoint_seconds\": %.6f, \"rows\": %d,"
              + " \"warmup_seconds\": %.6f, \"checkpoint_attempts\": %d}%n",
          timed[0], timed[1], (long) timed[2], warmup, ATTEMPTS.get());
    }
  }

  /** Seconds of the run, seconds of its final checkpoint, rows written. */
  static double[] run(
      MiniCluster mini, Configuration conf, String job, String input, String output, long windowMs)
      throws Exception {
    FLUSHED.set(0);
    WRITTEN.set(0);
    ATTEMPTS.set(0);
    long start = System.nanoTime();
    StreamExecutionEnvironment env = StreamExecutionEnvironment.getExecutionEnvironment(conf);
    env.setParallelism(PARALLELISM);
    FileSource<String> source =
        FileSource.forRecordStreamFormat(new TextLineInputFormat(), new Path(input)).build();
    TypeInformation<Tuple3<String, Long, Long>> rowType =
        Types.TUPLE(Types.STRING, Types.LONG, Types.LONG);
    DataStream<Tuple3<String, Long, Long>> events =
        env.fromSource(source, WatermarkStrategy.noWatermarks(), "events")
            .map(FlinkBench::parse)
            .returns(rowType);
    DataStream<Tuple3<String, Long, Long>> out;
    if (job.equals("sum")) {
      out = events.keyBy(e -> e.f0).process(new RunningSum()).returns(rowType);
    } else {
      out =
          events
              .assignTimestampsAndWatermarks(
                  WatermarkStrategy.<Tuple3<String, Long, Long>>forMonotonousTimestamps()
                      .withTimestampAssigner((e, previous) -> e.f2))
              .keyBy(e -> e.f0)
              .window(TumblingEventTimeWindows.of(Duration.ofMillis(windowMs)))
              .aggregate(new Sum(), new PerWindow(), Types.LONG, Types.LONG, rowType);
    }
    out.sinkTo(new CsvSink(output));
    StreamGraph graph = env.getStreamGraph();
    graph.setJobId(new JobID());
    JobID id = mini.submitJob(graph).get().getJobID();
    for (int polls = 1; FLUSHED.get() < PARALLELISM; polls++) {
      if (polls % 100 == 0 && mini.getJobStatus(id).get().isGloballyTerminalState()) {
        break; // failed before its end: its result says why
      }
      TimeUnit.MILLISECONDS.sleep(1);
    }
    long checkpointStart = System.nanoTime();
    // a task that is closing (the source, at the end of its input) declines a checkpoint, and
    // one that does not complete expires: try again until one completes or the job has ended
    // (it waits for a checkpoint, so it only ends by failing)
    while (FLUSHED.get() == PARALLELISM) {
      ATTEMPTS.incrementAndGet();
      try {
        // bounded: a trigger whose future never completed once held a run for 10 minutes
        mini.triggerCheckpoint(id).get(60, TimeUnit.SECONDS);
        break;
      } catch (ExecutionException | java.util.concurrent.TimeoutException declined) {
        if (mini.getJobStatus(id).get().isGloballyTerminalState()) {
          break;
        }
        TimeUnit.MILLISECONDS.sleep(2);
      }
    }
    long checkpointEnd = System.nanoTime();
    JobResult result = mini.requestJobResult(id).get();
    long end = System.nanoTime();
    if (!result.isSuccess()) {
      throw new IllegalStateException(
          "the Flink job failed", result.getSerializedThrowable().orElse(null));
    }
    return new double[] {
      (end - start) / 1e9, (checkpointEnd - checkpointStart) / 1e9, WRITTEN.get()
    };
  }

  static Tuple3<String, Long, Long> parse(String line) {
    int a = line.indexOf(',');
    int b = line.indexOf(',', a + 1);
    if (a < 0 || b < 0) {
      throw new IllegalArgumentException("not key,value,seq: " + line);
    }
    return Tuple3.of(
        line.substring(0, a),
        Long.parseLong(line.substring(a + 1, b)),
        Long.parseLong(line.substring(b + 1)));
  }

  /** Per event: read the key's sum (default 0), add the value, write it back, emit. */
  static final class RunningSum
      extends KeyedProcessFunction<String, Tuple3<String, Long, Long>, Tuple3<String, Long, Long>> {
    private transient ValueState<Long> total;

    @Override
    public void open(OpenContext context) {
      total = getRuntimeContext().getState(new ValueStateDescriptor<>("total", Types.LONG));
    }

    @Override
    public void processElement(
        Tuple3<String, Long, Long> event, Context ctx, Collector<Tuple3<String, Long, Long>> out)
        throws IOException {
      Long before = total.value();
      long sum = (before == null ? 0L : before) + event.f1;
      total.update(sum);
      out.collect(Tuple3.of(event.f0, event.f1, sum));
    }
  }

  static final class Sum implements AggregateFunction<Tuple3<String, Long, Long>, Long, Long> {
    @Override
    public Long createAccumulator() {
      return 0L;
    }

    @Override
    public Long add(Tuple3<String, Long, Long> event, Long accumulator) {
      return accumulator + event.f1;
    }

    @Override
    public Long getResult(Long accumulator) {
      return accumulator;
    }

    @Override
    public Long merge(Long a, Long b) {
      return a + b;
    }
  }

  static final class PerWindow
      extends ProcessWindowFunction<Long, Tuple3<String, Long, Long>, String, TimeWindow> {
    @Override
    public void process(
        String key, Context context, Iterable<Long> totals, Collector<Tuple3<String, Long, Long>> out) {
      for (Long total : totals) {
        out.collect(Tuple3.of(key, context.window().getStart(), total));
      }
    }
  }

  /** Every row to {@code <dir>/part-<subtask>.csv}; no commit protocol (the files are read after
   * the job). */
  static final class CsvSink implements Sink<Tuple3<String, Long, Long>> {
    private final String dir;

    CsvSink(String dir) {
      this.dir = dir;
    }

    @Override
    public SinkWriter<Tuple3<String, Long, Long>> createWriter(WriterInitContext context)
        throws IOException {
      java.nio.file.Path folder = Paths.get(dir);
      Files.createDirectories(folder);
      int subtask = context.getTaskInfo().getIndexOfThisSubtask();
      return new CsvWriter(
          Files.newBufferedWriter(folder.resolve("part-" + subtask + ".csv"), StandardCharsets.UTF_8));
    }
  }

  static final class CsvWriter implements SinkWriter<Tuple3<String, Long, Long>> {
    private final BufferedWriter writer;
    private long rows;

    CsvWriter(BufferedWriter writer) {
      this.writer = writer;
    }

    @Override
    public void write(Tuple3<String, Long, Long> row, Context context) throws IOException {
      writer.write(row.f0);
      writer.write(',');
      writer.write(Long.toString(row.f1));
      writer.write(',');
      writer.write(Long.toString(row.f2));
      writer.write('\n');
      rows++;
    }

    @Override
    public void flush(boolean endOfInput) throws IOException {
      writer.flush();
      if (endOfInput) {
        WRITTEN.addAndGet(rows);
        FLUSHED.incrementAndGet();
      }
    }

    @Override
    public void close() throws IOException {
      writer.close();
    }
  }
}
