package ballast.bench;

import com.hivemq.embedded.EmbeddedHiveMQ;

import java.nio.file.Files;
import java.nio.file.Path;

/**
 * Runs HiveMQ CE embedded until killed, for bench/compare.sh.
 *
 * <p>Usage: {@code HiveMQPeer PORT DIR file|in-memory}. DIR receives conf/config.xml (one TCP
 * listener on 127.0.0.1:PORT, the given persistence mode, every other setting at its default),
 * conf/logback.xml (warnings only), data/ and extensions/.
 */
public final class HiveMQPeer {
    public static void main(final String[] args) throws Exception {
        if (args.length != 3) {
            System.err.println("usage: HiveMQPeer PORT DIR file|in-memory");
            System.exit(2);
        }
        final int port = Integer.parseInt(args[0]);
        final Path dir = Path.of(args[1]);
        final String mode = args[2];
        final Path conf = Files.createDirectories(dir.resolve("conf"));
        Files.writeString(conf.resolve("config.xml"), """
                <?xml version="1.0"?>
                <hivemq>
                    <listeners>
                        <tcp-listener><port>%d</port><bind-address>127.0.0.1</bind-address></tcp-listener>
                    </listeners>
                    <anonymous-usage-statistics><enabled>false</enabled></anonymous-usage-statistics>
                    <persistence><mode>%s</mode></persistence>
                </hivemq>
                """.formatted(port, mode));
        // The default logging writes lines per connection; a benchmark wants warnings only.
        Files.writeString(conf.resolve("logback.xml"), """
                <configuration>
                    <appender name="CONSOLE" class="ch.qos.logback.core.ConsoleAppender">
                        <encoder><pattern>%d %-5level - %msg%n</pattern></encoder>
                    </appender>
                    <root level="WARN"><appender-ref ref="CONSOLE"/></root>
                </configuration>
                """);
        final EmbeddedHiveMQ hivemq = EmbeddedHiveMQ.builder()
                .withConfigurationFolder(conf)
                .withDataFolder(Files.createDirectories(dir.resolve("data")))
                .withExtensionsFolder(Files.createDirectories(dir.resolve("extensions")))
                .build();
        try {
            hivemq.start().join();
        } catch (final RuntimeException e) {
            // HiveMQ's own threads would keep the process up after a failed start.
            System.err.println("hivemq did not start: " + e);
            System.exit(1);
        }
        System.out.println("hivemq listening on 127.0.0.1:" + port + " persistence " + mode);
        Runtime.getRuntime().addShutdownHook(new Thread(() -> hivemq.stop().join()));
        Thread.currentThread().join();
    }
}
